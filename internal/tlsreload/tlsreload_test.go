package tlsreload_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/internal/testcerts"
	"github.com/jobwire/jobwire/internal/tlsreload"
)

// serve starts a broker serving TLS from files through a reloader.
func serve(t *testing.T, files tlsreload.Files) (*brokertest.Bundle, *tlsreload.Reloader) {
	t.Helper()
	r, err := tlsreload.New(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.New(t, brokertest.Options{ServerOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(r.ServerConfig()))}})
	return b, r
}

// peerName handshakes with the broker and returns the common name of the certificate it
// presented.
func peerName(t *testing.T, addr string, roots *x509.CertPool, client *tls.Certificate) (string, error) {
	t.Helper()
	cfg := &tls.Config{RootCAs: roots, NextProtos: []string{"h2"}}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	// TLS 1.3 reports a refused client certificate on the first read, not in the handshake.
	_ = conn.SetReadDeadline(time.Now().Add(brokertest.WaitTimeout))
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		return "", err
	}
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

func pool(pem []byte) *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(pem)
	return p
}

// TestRotation: after the files are replaced, the poller loads them and new handshakes see the
// new certificate; a replacement that does not load leaves the old one in use.
func TestRotation(t *testing.T) {
	t.Parallel()
	f := testcerts.Write(t, "")
	b, r := serve(t, tlsreload.Files{Cert: f.ServerCert, Key: f.ServerKey})
	clk := clock.NewFake(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.Watch(ctx, clk, time.Minute, nil)
	roots := pool(f.Authority.PEM)

	if name, err := peerName(t, b.Addr, roots, nil); err != nil || name != "jobwire broker" {
		t.Fatalf("first handshake: %q, %v", name, err)
	}
	next := f.Authority.Server(t, "jobwire broker rotated")
	testcerts.WriteFile(t, f.ServerKey, next.Key)
	testcerts.WriteFile(t, f.ServerCert, next.Cert)
	waitFor(t, clk, func() bool { return r.Certificate().Leaf.Subject.CommonName == "jobwire broker rotated" })
	if name, err := peerName(t, b.Addr, roots, nil); err != nil || name != "jobwire broker rotated" {
		t.Fatalf("handshake after rotation: %q, %v", name, err)
	}

	// A key that does not match the certificate (a rotation caught half way) is refused.
	other := f.Authority.Server(t, "mismatched")
	testcerts.WriteFile(t, f.ServerKey, other.Key)
	if changed, err := r.Reload(); err == nil || changed {
		t.Fatalf("Reload with a mismatched key = %v, %v; want an error", changed, err)
	}
	if name, err := peerName(t, b.Addr, roots, nil); err != nil || name != "jobwire broker rotated" {
		t.Fatalf("handshake after a bad rotation: %q, %v; want the previous certificate", name, err)
	}
}

// TestReloadOnSignal: a value on Watch's channel (SIGHUP in the broker) reloads at once, without
// waiting for the poll interval.
func TestReloadOnSignal(t *testing.T) {
	t.Parallel()
	f := testcerts.Write(t, "")
	_, r := serve(t, tlsreload.Files{Cert: f.ServerCert, Key: f.ServerKey})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hup := make(chan struct{})
	r.Watch(ctx, clock.NewFake(time.Now()), time.Hour, hup)
	next := f.Authority.Server(t, "after SIGHUP")
	testcerts.WriteFile(t, f.ServerKey, next.Key)
	testcerts.WriteFile(t, f.ServerCert, next.Cert)
	hup <- struct{}{}
	deadline := time.Now().Add(brokertest.WaitTimeout)
	for r.Certificate().Leaf.Subject.CommonName != "after SIGHUP" {
		if time.Now().After(deadline) {
			t.Fatal("the signal did not reload the files")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitFor advances the fake clock by the poll interval until cond holds: each step lets the
// poller run once.
func waitFor(t *testing.T, clk *clock.Fake, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(brokertest.WaitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("the reloader did not pick up the new files")
		}
		clk.Advance(time.Minute)
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMutualTLS: with a client CA the broker refuses clients without a certificate from it;
// a client with one calls through the Go client's TLS options. The client CA rotates too.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	f := testcerts.Write(t, "")
	b, r := serve(t, tlsreload.Files{Cert: f.ServerCert, Key: f.ServerKey, ClientCA: f.CA})
	roots := pool(f.Authority.PEM)
	if _, err := peerName(t, b.Addr, roots, nil); err == nil {
		t.Fatal("a client without a certificate completed a handshake with a broker requiring one")
	}
	stranger := testcerts.NewCA(t, "someone else")
	sc := stranger.Client(t, "intruder")
	strangerPair, err := tls.X509KeyPair(sc.Cert, sc.Key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := peerName(t, b.Addr, roots, &strangerPair); err == nil {
		t.Fatal("a client certificate from another CA was accepted")
	}

	ctx := context.Background()
	c, err := client.Dial(ctx, b.Addr, client.WithTLSFiles(f.CA, f.ClientCert, f.ClientKey))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := jobwirev1.NewAdminServiceClient(c.Conn()).GetStats(ctx, &jobwirev1.GetStatsRequest{}); err != nil {
		t.Fatalf("call over mutual TLS: %v", err)
	}

	// The client CA file now names the other CA: its clients get in on new connections.
	testcerts.WriteFile(t, f.CA, stranger.PEM)
	if changed, err := r.Reload(); err != nil || !changed {
		t.Fatalf("Reload = %v, %v", changed, err)
	}
	if _, err := peerName(t, b.Addr, roots, &strangerPair); err != nil {
		t.Fatalf("client of the new CA after rotation: %v", err)
	}
}

func TestNewRefusesBadFiles(t *testing.T) {
	t.Parallel()
	f := testcerts.Write(t, "")
	for name, files := range map[string]tlsreload.Files{
		"missing cert":    {Cert: f.ServerCert + ".nope", Key: f.ServerKey},
		"key of another":  {Cert: f.ServerCert, Key: f.ClientKey},
		"CA file not PEM": {Cert: f.ServerCert, Key: f.ServerKey, ClientCA: f.ServerKey},
		"missing CA file": {Cert: f.ServerCert, Key: f.ServerKey, ClientCA: f.CA + ".nope"},
	} {
		if _, err := tlsreload.New(files, nil); err == nil {
			t.Errorf("%s: New accepted %+v", name, files)
		}
	}
}

// TestCheckExpiry warns once per certificate when it ends within two weeks.
func TestCheckExpiry(t *testing.T) {
	t.Parallel()
	f := testcerts.Write(t, "")
	var logs strings.Builder
	r, err := tlsreload.New(tlsreload.Files{Cert: f.ServerCert, Key: f.ServerKey}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	notAfter := r.Certificate().Leaf.NotAfter
	r.CheckExpiry(notAfter.Add(-tlsreload.ExpiryWarning - time.Hour))
	if logs.Len() != 0 {
		t.Fatalf("warned with more than two weeks left: %s", logs.String())
	}
	r.CheckExpiry(notAfter.Add(-time.Hour))
	r.CheckExpiry(notAfter.Add(-time.Minute))
	if n := strings.Count(logs.String(), "expires soon"); n != 1 {
		t.Fatalf("%d warnings for one certificate, want 1:\n%s", n, logs.String())
	}
}
