package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinels of the connection failures that reconnecting cannot fix. errors.Is matches a
// *ConnectError against them.
var (
	// ErrTLS: the TLS handshake with the broker failed, or one side speaks TLS and the other
	// does not. The configuration of the client or the broker must change.
	ErrTLS = errors.New("jobwire: TLS handshake with the broker failed")
	// ErrAuth: the broker refused the token (UNAUTHENTICATED: missing, unknown or revoked;
	// PERMISSION_DENIED: its role or scope does not allow the call).
	ErrAuth = errors.New("jobwire: the broker refused the token")
)

// ConnectError is a failure to reach the broker that retrying cannot fix: a TLS handshake that
// failed, or a token the broker refused. Classify makes one from a call's error; the worker
// libraries stop with it instead of reconnecting.
type ConnectError struct {
	// Kind is ErrTLS or ErrAuth.
	Kind error
	// Problem says what happened, in a sentence.
	Problem string
	// Fix says what to change.
	Fix string

	err error // the call's error, for status.FromError and errors.Unwrap
}

func (e *ConnectError) Error() string {
	return "jobwire: " + e.Problem + "; " + e.Fix
}

// Unwrap returns the call's error (a gRPC status error).
func (e *ConnectError) Unwrap() error { return e.err }

// Is matches Kind.
func (e *ConnectError) Is(target error) bool { return target == e.Kind }

// GRPCStatus is the status of the call's error, so status.Code and status.FromError see
// through a ConnectError.
func (e *ConnectError) GRPCStatus() *status.Status {
	st, _ := status.FromError(e.err)
	return st
}

// Markers in the texts that the client's own TLS configuration and dialer put in a connection
// error, so that Classify can tell these failures from the transport's words.
const (
	noClientCertText = "the broker asks for a client certificate and none is configured"
	brokerTLSText    = "the broker closed the connection without answering, and it answers TLS"
)

// errNoClientCert ends the handshake of a client without a certificate at the broker's
// certificate request, rather than sending none and reading the broker's refusal as a dropped
// connection later (with TLS 1.3 the refusal comes after the client finished its handshake).
var errNoClientCert = errors.New(noClientCertText)

// Classify returns err as a *ConnectError when it is a failure that reconnecting cannot fix,
// and nil otherwise (a broker that is down or restarting, a dropped connection, any other
// answer). It reads the gRPC status: the broker's UNAUTHENTICATED and PERMISSION_DENIED, and the
// UNAVAILABLE that grpc-go gives a failed TLS handshake, with the handshake's error in the
// message.
func Classify(err error) *ConnectError {
	if err == nil {
		return nil
	}
	var ce *ConnectError
	if errors.As(err, &ce) {
		return ce
	}
	st, ok := status.FromError(err)
	if !ok {
		// Wrapped errors: status.FromError finds a status anywhere in the chain.
		return nil
	}
	msg := st.Message()
	auth := func(problem, fix string) *ConnectError {
		return &ConnectError{Kind: ErrAuth, Problem: problem, Fix: fix, err: err}
	}
	tlsErr := func(problem, fix string) *ConnectError {
		return &ConnectError{Kind: ErrTLS, Problem: problem, Fix: fix, err: err}
	}
	switch st.Code() {
	case codes.Unauthenticated:
		return auth("the broker refused the token: "+msg,
			"set "+EnvToken+" (or --token) to a token the broker issued (jobwire tokens create)")
	case codes.PermissionDenied:
		return auth("the token is not allowed this: "+msg,
			"use a token whose role and scope cover it (jobwire tokens create --role ... --types ...)")
	case codes.Unavailable:
	default:
		return nil
	}
	switch {
	case strings.Contains(msg, noClientCertText):
		return tlsErr("the broker requires a client certificate (mutual TLS) and none was given",
			"set "+EnvTLSCert+" and "+EnvTLSKey+" (--tls-cert, --tls-key) to a certificate signed by the CA the broker trusts")
	case strings.Contains(msg, brokerTLSText):
		return tlsErr("the broker serves TLS and this client connected without it",
			"set "+EnvTLSCA+" (--tls-ca) to the CA of the broker's certificate, or "+EnvTLS+"=true (--tls) if the system trusts it")
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return tlsErr("this client connected with TLS but the broker does not serve TLS",
			"start the broker with --tls-cert and --tls-key, or connect without TLS (unset "+EnvTLS+", "+EnvTLSCA+", "+EnvTLSCert+" and "+EnvTLSKey+")")
	case strings.Contains(msg, "certificate signed by unknown authority"):
		return tlsErr("the broker's certificate is not signed by a CA this client trusts ("+handshakeText(msg)+")",
			"set "+EnvTLSCA+" (--tls-ca) to the CA certificate that signed the broker's certificate")
	case strings.Contains(msg, "x509: certificate is valid for"), strings.Contains(msg, "x509: cannot validate certificate"):
		return tlsErr("the broker's certificate does not name the address dialled ("+handshakeText(msg)+")",
			"connect by a name the certificate holds, or set "+EnvTLSServerName+" to one")
	case strings.Contains(msg, "x509: certificate has expired"):
		return tlsErr("the broker's certificate has expired or is not valid yet ("+handshakeText(msg)+")",
			"renew the broker's certificate (docs/security.md#tls-and-mutual-tls)")
	case strings.Contains(msg, "tls: certificate required"):
		// The broker's alert for a client that sent none, from a tls.Config of the caller's.
		return tlsErr("the broker requires a client certificate (mutual TLS) and none was given",
			"set "+EnvTLSCert+" and "+EnvTLSKey+" (--tls-cert, --tls-key) to a certificate signed by the CA the broker trusts")
	case strings.Contains(msg, "tls: bad certificate"), strings.Contains(msg, "tls: unknown certificate authority"),
		strings.Contains(msg, "tls: expired certificate"):
		return tlsErr("the broker refused this client's certificate ("+handshakeText(msg)+")",
			"use a client certificate signed by the CA the broker trusts (its --tls-client-ca), and not expired")
	case strings.Contains(msg, "authentication handshake failed"):
		return tlsErr("the TLS handshake with the broker failed ("+handshakeText(msg)+")",
			"check the TLS settings ("+EnvTLSCA+", "+EnvTLSCert+", "+EnvTLSKey+") against the broker's (docs/security.md)")
	}
	return nil
}

// handshakeText is the part of grpc-go's connection error after its prefixes.
func handshakeText(msg string) string {
	for _, p := range []string{"connection error: desc = ", "transport: authentication handshake failed: "} {
		if i := strings.Index(msg, p); i >= 0 {
			msg = msg[i+len(p):]
		}
	}
	return strings.ReplaceAll(strings.Trim(msg, `"`), `\"`, `"`)
}

// http2Preface starts every plaintext HTTP/2 connection, and so every plaintext gRPC one.
const http2Preface = "PRI * HTTP/2.0\r\n"

// probeTimeout bounds the TLS probe of a broker that closed a plaintext connection.
const probeTimeout = 5 * time.Second

// dialTCP is the client's dialer. A connection that begins with the plaintext HTTP/2 preface
// and that the broker closes before sending a byte is what a TLS broker does with a plaintext
// client; the connection then tries a TLS handshake with the broker and, when it answers,
// reports brokerTLSText instead of the end of the stream, so that the error says what to fix.
func dialTCP(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &probeConn{Conn: c, addr: addr}, nil
}

type probeConn struct {
	net.Conn
	addr string

	// answered: the broker sent a byte, after which nothing is watched (and the hot path takes
	// no lock).
	answered atomic.Bool
	mu       sync.Mutex
	wrote    []byte // the first bytes written, up to len(http2Preface)
}

func (c *probeConn) Write(p []byte) (int, error) {
	if !c.answered.Load() {
		c.mu.Lock()
		if n := len(http2Preface) - len(c.wrote); n > 0 {
			c.wrote = append(c.wrote, p[:min(n, len(p))]...)
		}
		c.mu.Unlock()
	}
	return c.Conn.Write(p)
}

func (c *probeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.answered.Load() {
		return n, err
	}
	if n > 0 {
		c.answered.Store(true)
		return n, err
	}
	if err != nil && closedByPeer(err) {
		c.mu.Lock()
		plaintext := string(c.wrote) == http2Preface
		c.mu.Unlock()
		if plaintext && answersTLS(c.addr) {
			return 0, fmt.Errorf("%s (%w)", brokerTLSText, err)
		}
	}
	return n, err
}

// closedByPeer reports whether err is the end of a connection the other side closed.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

// answersTLS reports whether a TLS handshake with addr gets as far as the server's answer.
func answersTLS(addr string) bool {
	d := &net.Dialer{Timeout: probeTimeout}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // a probe: nothing is sent over it
	if err != nil {
		// A server that asks for a client certificate refuses the handshake with an alert,
		// which is still TLS.
		var alert tls.AlertError
		return errors.As(err, &alert) || strings.Contains(err.Error(), "remote error: tls:")
	}
	_ = c.Close()
	return true
}
