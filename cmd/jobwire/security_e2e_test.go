package main

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/internal/config"
	"github.com/jobwire/jobwire/internal/testcerts"
	"github.com/jobwire/jobwire/internal/tlsreload"
)

// TestE2ETokensOverMutualTLS runs the token commands and a producer's commands against a broker
// that requires client certificates and tokens.
func TestE2ETokensOverMutualTLS(t *testing.T) {
	t.Parallel()
	f := testcerts.Write(t, "")
	r, err := tlsreload.New(tlsreload.Files{Cert: f.ServerCert, Key: f.ServerKey, ClientCA: f.CA}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.New(t, brokertest.Options{RequireAuth: true,
		ServerOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(r.ServerConfig()))}})
	admin := map[string]string{"JOBWIRE_ADDR": b.Addr, "JOBWIRE_TLS_CA": f.CA, "JOBWIRE_TLS_CERT": f.ClientCert,
		"JOBWIRE_TLS_KEY": f.ClientKey, "JOBWIRE_TOKEN": b.AdminToken}

	res := runCLI(t, admin, "tokens", "create", "--role", "producer", "--queues", "mail", "--types", "email.*", "--name", "web")
	if res.code != 0 {
		t.Fatalf("tokens create: exit %d, %s", res.code, res.stderr)
	}
	token := strings.TrimSpace(res.stdout)
	e2eContains(t, "tokens create stderr", res.stderr, "created producer token", "queues mail; job types email.*", "shown only now")
	id := strings.Split(token, "_")[1]

	// The producer's own command line: flags instead of the environment.
	producer := []string{"--addr", b.Addr, "--tls-ca", f.CA, "--tls-cert", f.ClientCert, "--tls-key", f.ClientKey, "--token", token}
	if res := runCLI(t, nil, append([]string{"enqueue", "--type", "email.send", "--queue", "mail"}, producer...)...); res.code != 0 {
		t.Fatalf("enqueue in scope: exit %d, %s", res.code, res.stderr)
	}
	res = runCLI(t, nil, append([]string{"enqueue", "--type", "sms.send", "--queue", "mail"}, producer...)...)
	if res.code != 1 || !strings.Contains(res.stderr, "outside token "+id+"'s scope") {
		t.Fatalf("enqueue out of scope: exit %d, %q", res.code, res.stderr)
	}
	res = runCLI(t, nil, append([]string{"queues", "pause", "mail"}, producer...)...)
	if res.code != 1 || !strings.Contains(res.stderr, "needs an admin token") {
		t.Fatalf("producer pausing a queue: exit %d, %q", res.code, res.stderr)
	}

	res = runCLI(t, admin, "tokens", "list")
	if res.code != 0 {
		t.Fatalf("tokens list: exit %d, %s", res.code, res.stderr)
	}
	e2eContains(t, "tokens list", res.stdout, "ROLE", id, "producer", "web", "mail", "email.*")
	if strings.Contains(res.stdout, token) {
		t.Fatal("tokens list printed a secret")
	}
	if res := runCLI(t, admin, "tokens", "revoke", id); res.code != 0 || !strings.Contains(res.stdout, "revoked") {
		t.Fatalf("tokens revoke: exit %d, %q %q", res.code, res.stdout, res.stderr)
	}
	res = runCLI(t, nil, append([]string{"enqueue", "--type", "email.send", "--queue", "mail"}, producer...)...)
	if res.code != 1 || !strings.Contains(res.stderr, "revoked") {
		t.Fatalf("enqueue with a revoked token: exit %d, %q", res.code, res.stderr)
	}

	// No token, no client certificate, no TLS at all.
	noToken := map[string]string{"JOBWIRE_ADDR": b.Addr, "JOBWIRE_TLS_CA": f.CA, "JOBWIRE_TLS_CERT": f.ClientCert, "JOBWIRE_TLS_KEY": f.ClientKey}
	if res := runCLI(t, noToken, "stats"); res.code != 1 || !strings.Contains(res.stderr, "requires a token") {
		t.Fatalf("stats without a token: exit %d, %q", res.code, res.stderr)
	}
	noCert := map[string]string{"JOBWIRE_ADDR": b.Addr, "JOBWIRE_TLS_CA": f.CA, "JOBWIRE_TOKEN": b.AdminToken}
	if res := runCLI(t, noCert, "stats"); res.code != 1 {
		t.Fatalf("stats without a client certificate: exit %d, %q", res.code, res.stderr)
	}
	if res := runCLI(t, map[string]string{"JOBWIRE_ADDR": b.Addr, "JOBWIRE_TOKEN": b.AdminToken}, "stats"); res.code != 1 {
		t.Fatalf("stats over plaintext to a TLS broker: exit %d, %q", res.code, res.stderr)
	}
}

// TestE2ETLSFlagErrors: client TLS flags that cannot work fail before anything is sent.
func TestE2ETLSFlagErrors(t *testing.T) {
	t.Parallel()
	f := testcerts.Write(t, "")
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"cert without key": {[]string{"--tls-cert", f.ClientCert}, "--tls-cert and --tls-key go together"},
		"missing CA file":  {[]string{"--tls-ca", f.CA + ".nope"}, "read TLS CA file"},
		"CA file not PEM":  {[]string{"--tls-ca", f.ClientKey}, "holds no PEM certificate"},
		"mismatched key":   {[]string{"--tls-cert", f.ClientCert, "--tls-key", f.ServerKey}, "load client certificate"},
		"token with space": {[]string{"--token", "jw_a b"}, "white space"},
	} {
		res := runCLI(t, nil, append([]string{"stats", "--addr", "127.0.0.1:1"}, c.args...)...)
		if res.code != 2 || !strings.Contains(res.stderr, c.want) || strings.Count(strings.TrimSpace(res.stderr), "\n") > 0 {
			t.Errorf("%s: exit %d, %q; want 2 and one line naming %q", name, res.code, res.stderr, c.want)
		}
	}
}

// TestServeRefusesOpenNetworkListen: serve will not listen beyond loopback without TLS and auth
// unless --insecure is given, and says so in one sentence before touching the database.
func TestServeRefusesOpenNetworkListen(t *testing.T) {
	t.Parallel()
	f := testcerts.Write(t, "")
	for name, args := range map[string][]string{
		"plain":             {"--listen", "0.0.0.0:0"},
		"every interface":   {"--listen", ":0"},
		"TLS without auth":  {"--listen", "0.0.0.0:0", "--tls-cert", f.ServerCert, "--tls-key", f.ServerKey},
		"auth without TLS":  {"--listen", "0.0.0.0:0", "--auth"},
		"cert without key":  {"--tls-cert", f.ServerCert},
		"client CA, no TLS": {"--tls-client-ca", f.CA},
		"open dashboard":    {"--http-listen", "0.0.0.0:0"},
	} {
		db := filepath.Join(t.TempDir(), "j.db")
		res := runServeBriefly(t, append([]string{"serve", "--db", db}, args...)...)
		if res.code != 2 || strings.Count(strings.TrimSpace(res.stderr), "\n") > 0 {
			t.Errorf("%s: exit %d, %q; want 2 and one sentence", name, res.code, res.stderr)
		}
		if strings.HasPrefix(args[1], "0.0.0.0") || args[1] == ":0" {
			if !strings.Contains(res.stderr, "--insecure") || !strings.Contains(res.stderr, "refusing to") {
				t.Errorf("%s: %q does not say how to proceed", name, res.stderr)
			}
		}
		if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the database was created: %v", name, err)
		}
	}
	res := runCLI(t, map[string]string{"JOBWIRE_AUTH": "maybe"}, "serve", "--db", filepath.Join(t.TempDir(), "j.db"))
	if res.code != 2 || !strings.Contains(res.stderr, "JOBWIRE_AUTH") {
		t.Errorf("JOBWIRE_AUTH=maybe: exit %d, %q", res.code, res.stderr)
	}
}

// TestServeAuthBootstrap starts `jobwire serve --auth` on a fresh database: it writes an admin
// token to a 0600 file, which then works for admin commands, and anonymous calls are refused.
func TestServeAuthBootstrap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "j.db")
	addr := freeLoopbackAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result, 1)
	go func() {
		var out, errOut strings.Builder
		e := &env{stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }, now: time.Now}
		code := e.run(ctx, []string{"serve", "--auth", "--listen", addr, "--db", db, "--log-level", "warn"})
		done <- result{code: code, stdout: out.String(), stderr: errOut.String()}
	}()
	defer func() {
		cancel()
		if res := <-done; res.code != 0 {
			t.Errorf("serve: exit %d, %s", res.code, res.stderr)
		} else if !strings.Contains(res.stderr, db+".admin-token") {
			t.Errorf("serve did not log the token file's path: %s", res.stderr)
		}
	}()
	file := db + ".admin-token"
	var token string
	deadline := time.Now().Add(brokertest.WaitTimeout)
	for {
		if data, err := os.ReadFile(file); err == nil && len(data) > 0 {
			token = strings.TrimSpace(string(data))
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("serve --auth wrote no admin token file")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	if res := runCLI(t, map[string]string{"JOBWIRE_TOKEN": token}, "tokens", "list", "--addr", addr); res.code != 0 || !strings.Contains(res.stdout, "bootstrap") {
		t.Fatalf("tokens list with the bootstrap token: exit %d, %q %q", res.code, res.stdout, res.stderr)
	}
	if res := runCLI(t, nil, "stats", "--addr", addr); res.code != 1 || !strings.Contains(res.stderr, "requires a token") {
		t.Fatalf("anonymous stats: exit %d, %q", res.code, res.stderr)
	}
}

// runServeBriefly runs a serve command line that should be refused; if it starts serving
// instead, it is stopped after a while and the test sees exit status 0.
func runServeBriefly(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), brokertest.WaitTimeout)
	defer cancel()
	var out, errOut strings.Builder
	e := &env{stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }, now: time.Now}
	code := e.run(ctx, args)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestServeSecurityFromEnvironment: the security flags come from JOBWIRE_* variables too, and a
// flag wins over its variable.
func TestServeSecurityFromEnvironment(t *testing.T) {
	t.Parallel()
	f := testcerts.Write(t, "")
	environ := map[string]string{"JOBWIRE_AUTH": "true", "JOBWIRE_TLS_CERT": f.ServerCert, "JOBWIRE_TLS_KEY": f.ServerKey,
		"JOBWIRE_TLS_CLIENT_CA": f.CA, "JOBWIRE_LISTEN": "0.0.0.0:7070", "JOBWIRE_BOOTSTRAP_TOKEN": "from-the-environment-0123456789abcdef"}
	fs := flagsFor(find("serve"))
	sf := addServeFlags(&env{getenv: func(k string) string { return environ[k] }}, fs)
	if _, err := parse(fs, []string{"--tls-client-ca", f.CA + ".flag"}); err != nil {
		t.Fatal(err)
	}
	cfg := config.Defaults()
	cfg.DB = filepath.Join(t.TempDir(), "j.db")
	if err := sf.apply(&cfg); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if !cfg.Auth || cfg.TLS.Cert != f.ServerCert || cfg.TLS.Key != f.ServerKey || cfg.TLS.ClientCA != f.CA+".flag" ||
		cfg.BootstrapToken != environ["JOBWIRE_BOOTSTRAP_TOKEN"] {
		t.Fatalf("config from the environment: auth %v, TLS %+v, bootstrap token %q", cfg.Auth, cfg.TLS, cfg.BootstrapToken)
	}
}

// TestE2EServerTLS: against a broker serving TLS without client certificates, the CA and a token
// are enough; without the CA the broker's certificate is not trusted.
func TestE2EServerTLS(t *testing.T) {
	t.Parallel()
	f := testcerts.Write(t, "")
	r, err := tlsreload.New(tlsreload.Files{Cert: f.ServerCert, Key: f.ServerKey}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.New(t, brokertest.Options{RequireAuth: true,
		ServerOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(r.ServerConfig()))}})
	viewer := b.Token(auth.RoleViewer, auth.Scope{})
	if res := runCLI(t, map[string]string{"JOBWIRE_TOKEN": viewer}, "stats", "--addr", b.Addr, "--tls-ca", f.CA); res.code != 0 {
		t.Fatalf("stats over TLS: exit %d, %s", res.code, res.stderr)
	}
	if res := runCLI(t, map[string]string{"JOBWIRE_TOKEN": viewer}, "stats", "--addr", b.Addr, "--tls"); res.code != 1 {
		t.Fatalf("stats trusting only the system's CAs: exit %d, %s", res.code, res.stderr)
	}
}

// TestTokensCreateChecksInput: a token that cannot be made fails before anything is sent.
func TestTokensCreateChecksInput(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"no role":      {nil, "--role is required"},
		"unknown role": {[]string{"--role", "boss"}, `unknown role "boss"`},
		"scoped admin": {[]string{"--role", "admin", "--queues", "mail"}, "only to producer and worker tokens"},
		"argument":     {[]string{"--role", "worker", "extra"}, `unexpected argument "extra"`},
	} {
		res := runCLI(t, nil, append([]string{"tokens", "create", "--addr", "127.0.0.1:1"}, c.args...)...)
		if res.code != 2 || !strings.Contains(res.stderr, c.want) {
			t.Errorf("%s: exit %d, %q; want 2 naming %q", name, res.code, res.stderr, c.want)
		}
	}
}

// TestE2ETLSMismatchSaysWhatToFix: a command whose TLS settings do not match the broker's says
// what happened and which setting fixes it, instead of calling the broker unreachable.
func TestE2ETLSMismatchSaysWhatToFix(t *testing.T) {
	t.Parallel()
	f := testcerts.Write(t, "")
	other := testcerts.Write(t, "")
	r, err := tlsreload.New(tlsreload.Files{Cert: f.ServerCert, Key: f.ServerKey, ClientCA: f.CA}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.New(t, brokertest.Options{RequireAuth: true, Quiet: true,
		ServerOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(r.ServerConfig()))}})
	plain := brokertest.New(t, brokertest.Options{Quiet: true})
	for name, c := range map[string]struct {
		env  map[string]string
		want []string
	}{
		"plaintext": {map[string]string{"JOBWIRE_ADDR": b.Addr, "JOBWIRE_TOKEN": b.AdminToken},
			[]string{"serves TLS and this client connected without it", "JOBWIRE_TLS_CA"}},
		"wrong CA": {map[string]string{"JOBWIRE_ADDR": b.Addr, "JOBWIRE_TLS_CA": other.CA, "JOBWIRE_TOKEN": b.AdminToken},
			[]string{"not signed by a CA this client trusts", "JOBWIRE_TLS_CA"}},
		"no client certificate": {map[string]string{"JOBWIRE_ADDR": b.Addr, "JOBWIRE_TLS_CA": f.CA, "JOBWIRE_TOKEN": b.AdminToken},
			[]string{"requires a client certificate", "JOBWIRE_TLS_CERT"}},
		"TLS against plaintext": {map[string]string{"JOBWIRE_ADDR": plain.Addr, "JOBWIRE_TLS_CA": f.CA},
			[]string{"does not serve TLS", "--tls-cert"}},
	} {
		res := runCLI(t, c.env, "queues", "list")
		if res.code != 1 {
			t.Errorf("%s: exit %d, want 1; stderr %q", name, res.code, res.stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(res.stderr, w) {
				t.Errorf("%s: stderr %q does not say %q", name, res.stderr, w)
			}
		}
		if strings.Contains(res.stderr, "is `jobwire serve` running") {
			t.Errorf("%s: stderr %q calls the broker unreachable", name, res.stderr)
		}
	}
}
