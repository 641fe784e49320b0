package client_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/internal/testcerts"
	"github.com/jobwire/jobwire/internal/tlsreload"
)

// secureBroker starts a broker with auth on that serves TLS, requiring client certificates
// when mutual is set.
func secureBroker(t *testing.T, mutual bool) (*brokertest.Bundle, testcerts.Files) {
	t.Helper()
	f := testcerts.Write(t, "")
	files := tlsreload.Files{Cert: f.ServerCert, Key: f.ServerKey}
	if mutual {
		files.ClientCA = f.CA
	}
	r, err := tlsreload.New(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.New(t, brokertest.Options{RequireAuth: true,
		ServerOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(r.ServerConfig()))}})
	return b, f
}

func TestDialTLSAndToken(t *testing.T) {
	t.Parallel()
	for _, mutual := range []bool{false, true} {
		b, f := secureBroker(t, mutual)
		token := b.Token(auth.RoleProducer, auth.Scope{})
		certFile, keyFile := "", ""
		if mutual {
			certFile, keyFile = f.ClientCert, f.ClientKey
		}
		ctx := context.Background()
		c, err := client.Dial(ctx, b.Addr, client.WithTLSFiles(f.CA, certFile, keyFile), client.WithToken(token))
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Enqueue(ctx, "email.send", []byte(`{}`))
		if err != nil {
			t.Fatalf("mutual=%v: enqueue over TLS with a token: %v", mutual, err)
		}
		if _, err := c.Get(ctx, res.ID); err != nil {
			t.Fatalf("mutual=%v: get: %v", mutual, err)
		}
		_ = c.Close()

		// The same broker without the token.
		anon, err := client.Dial(ctx, b.Addr, client.WithTLSFiles(f.CA, certFile, keyFile))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := anon.Enqueue(ctx, "email.send", []byte(`{}`)); status.Code(err) != codes.Unauthenticated {
			t.Errorf("mutual=%v: enqueue without a token: %v, want UNAUTHENTICATED", mutual, err)
		}
		_ = anon.Close()
	}
}

func TestDialTLSFilesErrors(t *testing.T) {
	t.Parallel()
	f := testcerts.Write(t, "")
	for name, opt := range map[string]client.DialOption{
		"missing CA":       client.WithTLSFiles(f.CA+".nope", "", ""),
		"cert without key": client.WithTLSFiles(f.CA, f.ClientCert, ""),
		"mismatched key":   client.WithTLSFiles(f.CA, f.ClientCert, f.ServerKey),
	} {
		if _, err := client.Dial(context.Background(), "127.0.0.1:1", opt); err == nil || !strings.Contains(err.Error(), "jobwire: dial") {
			t.Errorf("%s: Dial = %v, want an error", name, err)
		}
	}
}
