// Package tlsreload serves TLS from certificate files that may be replaced while the broker
// runs. The server's tls.Config reads the current certificate and client CA pool through an
// atomic pointer on every handshake, and a poller re-reads the files when their content
// changes: certificates rotate without a restart. A new set that does not load (a key that does
// not match its certificate, a half-written file) is logged and the old one stays in use.
//
// Connections already open keep the certificate they were made with; worker streams pick up a
// new one when they reconnect.
package tlsreload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
)

// Files names the PEM files the broker serves TLS from.
type Files struct {
	Cert, Key string
	// ClientCA, when set, holds the CA certificates client certificates must chain to: the
	// broker then requires a client certificate on every connection (mutual TLS).
	ClientCA string
}

// bundle is one loaded set of files.
type bundle struct {
	cert      *tls.Certificate
	clientCAs *x509.CertPool
}

// Reloader holds the current certificate and client CA pool.
type Reloader struct {
	files Files
	log   *slog.Logger
	cur   atomic.Pointer[bundle]

	mu     sync.Mutex // serializes Reload and CheckExpiry
	seen   [sha256.Size]byte
	warned *tls.Certificate // the certificate last warned about by CheckExpiry
}

// ExpiryWarning is how long before its end a certificate in use is reported as expiring.
const ExpiryWarning = 14 * 24 * time.Hour

// New loads files; it fails when they do not make a usable set, so a broker never starts with
// a bad certificate.
func New(files Files, log *slog.Logger) (*Reloader, error) {
	if log == nil {
		log = slog.Default()
	}
	r := &Reloader{files: files, log: log}
	raw, err := r.read()
	if err != nil {
		return nil, err
	}
	b, err := load(raw)
	if err != nil {
		return nil, err
	}
	r.seen = raw.sum()
	r.cur.Store(b)
	return r, nil
}

// contents is what the files held at one read.
type contents struct{ cert, key, ca []byte }

func (c contents) sum() [sha256.Size]byte {
	return sha256.Sum256(bytes.Join([][]byte{c.cert, c.key, c.ca}, []byte{0}))
}

func (r *Reloader) read() (contents, error) {
	var c contents
	var err error
	if c.cert, err = os.ReadFile(r.files.Cert); err != nil {
		return c, fmt.Errorf("read TLS certificate: %w", err)
	}
	if c.key, err = os.ReadFile(r.files.Key); err != nil {
		return c, fmt.Errorf("read TLS key: %w", err)
	}
	if r.files.ClientCA != "" {
		if c.ca, err = os.ReadFile(r.files.ClientCA); err != nil {
			return c, fmt.Errorf("read TLS client CA: %w", err)
		}
	}
	return c, nil
}

func load(c contents) (*bundle, error) {
	pair, err := tls.X509KeyPair(c.cert, c.key)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate and key: %w", err)
	}
	b := &bundle{cert: &pair}
	if c.ca != nil {
		b.clientCAs = x509.NewCertPool()
		if !b.clientCAs.AppendCertsFromPEM(c.ca) {
			return nil, errors.New("TLS client CA file holds no PEM certificate")
		}
	}
	return b, nil
}

// Reload reads the files again and, when their content changed and loads, makes it current.
// It reports whether the certificate in use changed. A changed set that fails to load is
// reported once, and the certificate in use stays.
func (r *Reloader) Reload() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	raw, err := r.read()
	if err != nil {
		return false, err
	}
	sum := raw.sum()
	if sum == r.seen {
		return false, nil
	}
	r.seen = sum
	b, err := load(raw)
	if err != nil {
		return false, err
	}
	r.cur.Store(b)
	return true, nil
}

// Watch polls the files every interval, and each time a value arrives on now (SIGHUP, for an
// operator who just replaced them), until ctx ends, logging each rotation and each set of files
// that could not be used. now may be nil.
func (r *Reloader) Watch(ctx context.Context, clk clock.Clock, interval time.Duration, now <-chan struct{}) {
	var poll func()
	poll = func() {
		if ctx.Err() != nil {
			return
		}
		r.check(clk.Now())
		clk.AfterFunc(interval, poll)
	}
	clk.AfterFunc(interval, poll)
	if now != nil {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-now:
					r.check(clk.Now())
				}
			}
		}()
	}
}

// check reloads the files and logs what came of it.
func (r *Reloader) check(now time.Time) {
	changed, err := r.Reload()
	switch {
	case err != nil:
		r.log.Error("TLS files changed but cannot be used; still serving the previous certificate", "err", err)
	case changed:
		r.log.Info("TLS certificate reloaded", "cert", r.files.Cert, "not_after", r.cur.Load().cert.Leaf.NotAfter)
	}
	r.CheckExpiry(now)
}

// CheckExpiry logs a warning, once per certificate, when the certificate in use ends within
// ExpiryWarning of now (or has ended): a rotation that never happened shows up days before
// clients start failing.
func (r *Reloader) CheckExpiry(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cert := r.cur.Load().cert
	left := cert.Leaf.NotAfter.Sub(now)
	if left > ExpiryWarning || r.warned == cert {
		return
	}
	r.warned = cert
	r.log.Warn("the TLS certificate expires soon: replace the files; the broker picks them up without a restart",
		"cert", r.files.Cert, "not_after", cert.Leaf.NotAfter, "left", left.Round(time.Minute))
}

// Certificate returns the certificate in use.
func (r *Reloader) Certificate() *tls.Certificate { return r.cur.Load().cert }

// HTTPConfig returns the TLS configuration of an HTTP listener (the dashboard and metrics):
// the same certificate, read on every handshake, but no client certificate is asked for, since
// browsers and scrapers seldom hold one and the listener checks tokens itself.
func (r *Reloader) HTTPConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return r.cur.Load().cert, nil
		},
	}
}

// ServerConfig returns the TLS configuration to serve with. Every handshake reads the current
// files' certificate and, with mutual TLS, client CA pool.
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			b := r.cur.Load()
			cfg := &tls.Config{
				MinVersion:   tls.VersionTLS12,
				Certificates: []tls.Certificate{*b.cert},
				NextProtos:   []string{"h2"},
			}
			if b.clientCAs != nil {
				cfg.ClientAuth = tls.RequireAndVerifyClientCert
				cfg.ClientCAs = b.clientCAs
			}
			return cfg, nil
		},
	}
}
