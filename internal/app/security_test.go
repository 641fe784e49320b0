package app_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/config"
	"github.com/jobwire/jobwire/internal/testcerts"
)

// TestDashboardNeedsTokensWhenAuthIsOn: with auth on, the HTTP listener's dashboard API answers
// an anonymous caller, a made-up token and a producer token 401; viewer and admin tokens get in.
func TestDashboardNeedsTokensWhenAuthIsOn(t *testing.T) {
	t.Parallel()
	const admin = "dashboard-test-admin-token-0123456789"
	a := runBroker(t, func(c *config.Config) { c.Auth, c.BootstrapToken = true, admin })
	ctx := context.Background()
	c, err := client.Dial(ctx, a.GRPC.String(), client.WithToken(admin))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tokens := jobwirev1.NewTokenServiceClient(c.Conn())
	mint := func(role jobwirev1.TokenRole) string {
		res, err := tokens.CreateToken(ctx, &jobwirev1.CreateTokenRequest{Role: role})
		if err != nil {
			t.Fatal(err)
		}
		return res.GetToken()
	}
	viewer, producer := mint(jobwirev1.TokenRole_TOKEN_ROLE_VIEWER), mint(jobwirev1.TokenRole_TOKEN_ROLE_PRODUCER)
	for name, c := range map[string]struct {
		token string
		want  int
	}{
		"no token":       {"", http.StatusUnauthorized},
		"made-up token":  {"jw_0000000000000000_made-up", http.StatusUnauthorized},
		"producer token": {producer, http.StatusUnauthorized},
		"viewer token":   {viewer, http.StatusOK},
		"admin token":    {admin, http.StatusOK},
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.HTTP.String()+"/api/me", nil)
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != c.want {
			t.Errorf("GET /api/me with %s: %d %s, want %d", name, res.StatusCode, strings.TrimSpace(string(body)), c.want)
		}
	}
}

// TestHTTPListenerServesTLS: with TLS on, the HTTP listener serves it too, with the broker's
// certificate and no client certificate asked for; plaintext HTTP gets nothing.
func TestHTTPListenerServesTLS(t *testing.T) {
	t.Parallel()
	f := testcerts.Write(t, "")
	a := runBroker(t, func(c *config.Config) {
		c.TLS = config.TLS{Cert: f.ServerCert, Key: f.ServerKey, ClientCA: f.CA, ReloadInterval: time.Minute}
	})
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(f.Authority.PEM)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	res, err := hc.Get("https://" + a.HTTP.String() + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz over TLS: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz over TLS: %d", res.StatusCode)
	}
	if res, err := http.Get("http://" + a.HTTP.String() + "/healthz"); err == nil {
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			t.Fatal("the HTTP listener answered plaintext HTTP with TLS on")
		}
	}
}

// TestSIGHUPReloadsCertificates: after the files are replaced, SIGHUP makes the broker serve the
// new certificate without waiting for the next poll (an hour here).
func TestSIGHUPReloadsCertificates(t *testing.T) {
	t.Parallel()
	f := testcerts.Write(t, "")
	a := runBroker(t, func(c *config.Config) {
		c.TLS = config.TLS{Cert: f.ServerCert, Key: f.ServerKey, ReloadInterval: time.Hour}
	})
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(f.Authority.PEM)
	served := func() string {
		conn, err := tls.Dial("tcp", a.GRPC.String(), &tls.Config{RootCAs: roots, NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	next := f.Authority.Server(t, "after SIGHUP")
	testcerts.WriteFile(t, f.ServerKey, next.Key)
	testcerts.WriteFile(t, f.ServerCert, next.Cert)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for served() != "after SIGHUP" {
		if time.Now().After(deadline) {
			t.Fatal("SIGHUP did not make the broker serve the new certificate")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
