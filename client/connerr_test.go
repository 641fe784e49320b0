package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/internal/testcerts"
)

// TestClassifyCallErrors: a call's error is a *ConnectError when reconnecting cannot fix it
// (TLS on one side only, a CA that does not match, a missing client certificate) and nil when
// the broker is only out of reach, which callers retry.
func TestClassifyCallErrors(t *testing.T) {
	t.Parallel()
	mtls, f := secureBroker(t, true)
	other := testcerts.Write(t, "")
	plain := brokertest.New(t, brokertest.Options{Quiet: true})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := lis.Addr().String()
	_ = lis.Close()
	for name, c := range map[string]struct {
		addr string
		opts []client.DialOption
		kind error // nil: not a ConnectError
		fix  string
	}{
		"plaintext against TLS": {mtls.Addr, nil, client.ErrTLS, client.EnvTLSCA},
		"wrong CA":              {mtls.Addr, []client.DialOption{client.WithTLSFiles(other.CA, f.ClientCert, f.ClientKey)}, client.ErrTLS, client.EnvTLSCA},
		"no client certificate": {mtls.Addr, []client.DialOption{client.WithTLSFiles(f.CA, "", "")}, client.ErrTLS, client.EnvTLSCert},
		"TLS against plaintext": {plain.Addr, []client.DialOption{client.WithTLSFiles(f.CA, "", "")}, client.ErrTLS, "--tls-cert"},
		"no token":              {mtls.Addr, []client.DialOption{client.WithTLSFiles(f.CA, f.ClientCert, f.ClientKey)}, client.ErrAuth, client.EnvToken},
		"nothing listening":     {closed, nil, nil, ""},
	} {
		cl, err := client.Dial(context.Background(), c.addr, c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.ListQueues(context.Background())
		_ = cl.Close()
		ce := client.Classify(err)
		if c.kind == nil {
			if err == nil || ce != nil || errors.Is(err, client.ErrTLS) || errors.Is(err, client.ErrAuth) {
				t.Errorf("%s: ListQueues = %v, Classify = %v; want an error Classify leaves alone", name, err, ce)
			}
			continue
		}
		if !errors.Is(err, c.kind) {
			t.Errorf("%s: errors.Is(%v, %v) = false", name, err, c.kind)
		}
		if ce == nil || !errors.Is(ce, c.kind) || !strings.Contains(ce.Fix, c.fix) {
			t.Errorf("%s: ListQueues = %v, Classify = %v; want %v with a fix naming %s", name, err, ce, c.kind, c.fix)
		}
	}
}
