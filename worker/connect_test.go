package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/internal/testcerts"
	"github.com/jobwire/jobwire/internal/tlsreload"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/worker"
)

// tlsBroker starts a broker with auth on that serves TLS with the certificates of f, requiring
// client certificates when mutual is set.
func tlsBroker(t *testing.T, f testcerts.Files, mutual bool) *brokertest.Bundle {
	t.Helper()
	files := tlsreload.Files{Cert: f.ServerCert, Key: f.ServerKey}
	if mutual {
		files.ClientCA = f.CA
	}
	r, err := tlsreload.New(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	return brokertest.New(t, brokertest.Options{RequireAuth: true, Quiet: true,
		ServerOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(r.ServerConfig()))}})
}

// TestRunStopsOnAnInsecurableConnection: a worker whose TLS settings do not match the broker's,
// or whose token the broker refuses, cannot get further by reconnecting, so Run returns a
// *client.ConnectError that names what to set, instead of retrying until it is stopped.
func TestRunStopsOnAnInsecurableConnection(t *testing.T) {
	t.Parallel()
	f := testcerts.Write(t, "")
	other := testcerts.Write(t, "")
	mtls := tlsBroker(t, f, true)
	plain := brokertest.New(t, brokertest.Options{Quiet: true})
	token := mtls.Token(auth.RoleWorker, auth.Scope{})
	for name, c := range map[string]struct {
		addr    string
		opts    []client.DialOption
		kind    error
		problem string
		fix     string
	}{
		"wrong CA": {mtls.Addr, []client.DialOption{client.WithTLSFiles(other.CA, f.ClientCert, f.ClientKey), client.WithToken(token)},
			client.ErrTLS, "not signed by a CA this client trusts", client.EnvTLSCA},
		"no client certificate": {mtls.Addr, []client.DialOption{client.WithTLSFiles(f.CA, "", ""), client.WithToken(token)},
			client.ErrTLS, "requires a client certificate", client.EnvTLSCert},
		"plaintext against TLS": {mtls.Addr, []client.DialOption{client.WithToken(token)},
			client.ErrTLS, "serves TLS and this client connected without it", client.EnvTLSCA},
		"TLS against plaintext": {plain.Addr, []client.DialOption{client.WithTLSFiles(f.CA, "", "")},
			client.ErrTLS, "does not serve TLS", "--tls-cert"},
		"bad token": {mtls.Addr, []client.DialOption{client.WithTLSFiles(f.CA, f.ClientCert, f.ClientKey), client.WithToken(token + "x")},
			client.ErrAuth, "refused the token", client.EnvToken},
	} {
		c2, err := client.Dial(context.Background(), c.addr, c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		w, err := worker.New(c2.Conn(), worker.Options{ID: "w", Concurrency: 1})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("email.send", func(context.Context, *worker.Job) error { return nil })
		// Bounded: a worker that retries runs until this ends, and then Run returns nil.
		ctx, cancel := context.WithTimeout(context.Background(), brokertest.WaitTimeout)
		err = w.Run(ctx)
		cancel()
		_ = c2.Close()
		var ce *client.ConnectError
		if !errors.As(err, &ce) || !errors.Is(err, c.kind) {
			t.Errorf("%s: Run = %v, want a *client.ConnectError matching %v", name, err, c.kind)
			continue
		}
		if !strings.Contains(ce.Problem, c.problem) || !strings.Contains(ce.Fix, c.fix) {
			t.Errorf("%s: Run = %q, want a problem saying %q and a fix naming %s", name, err, c.problem, c.fix)
		}
	}
}

// TestRunFromEnvironment: a worker dialled with client.DialEnv reaches a broker with mutual
// TLS and auth on through the documented variables, and runs a job.
func TestRunFromEnvironment(t *testing.T) {
	f := testcerts.Write(t, "")
	b := tlsBroker(t, f, true)
	for k, v := range map[string]string{
		client.EnvAddr: b.Addr, client.EnvToken: b.AdminToken,
		client.EnvTLSCA: f.CA, client.EnvTLSCert: f.ClientCert, client.EnvTLSKey: f.ClientKey,
		client.EnvTLS: "", client.EnvTLSServerName: "localhost",
	} {
		t.Setenv(k, v)
	}
	c, err := client.DialEnv(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := worker.New(c.Conn(), worker.Options{ID: "env", Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan int64, 1)
	w.Handle("email.send", func(_ context.Context, j *worker.Job) error { ran <- j.ID; return nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	res, err := c.Enqueue(context.Background(), "email.send", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	id := res.ID
	select {
	case got := <-ran:
		if got != id {
			t.Fatalf("ran job %d, want %d", got, id)
		}
	case err := <-done:
		t.Fatalf("Run returned before the job ran: %v", err)
	case <-time.After(brokertest.WaitTimeout):
		t.Fatal("the job did not run")
	}
	deadline := time.Now().Add(brokertest.WaitTimeout)
	for {
		j, err := c.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State == job.StateSucceeded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d is %s, want SUCCEEDED", id, j.State)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
