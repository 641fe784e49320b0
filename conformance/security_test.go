package conformance

import (
	"context"
	"time"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job"
)

// tlsMode is how a scenario's broker serves.
type tlsMode int

const (
	tlsOff    tlsMode = iota // plaintext, auth off
	tlsServer                // TLS and auth
	tlsMutual                // TLS requiring client certificates, and auth
)

// tlsToken: against a broker that serves TLS (requiring client certificates with tlsMutual)
// and checks tokens, the worker connects with the CA, its client certificate when needed and a
// worker token from its environment, and runs a job; a worker with a made-up token stops at
// once with an error instead of retrying.
func tlsToken(e *env) {
	ctx, cancel := context.WithTimeout(e.t.Context(), waitTimeout)
	defer cancel()
	res, err := jobwirev1.NewTokenServiceClient(e.c.Conn()).CreateToken(ctx, &jobwirev1.CreateTokenRequest{
		Role: jobwirev1.TokenRole_TOKEN_ROLE_WORKER, Name: e.lang.name + " conformance worker"})
	if err != nil {
		e.t.Fatalf("create a worker token: %v", err)
	}
	tls := []string{"JOBWIRE_TLS_CA=" + e.certs.CA}
	if e.cfg.tls == tlsMutual {
		tls = append(tls, "JOBWIRE_TLS_CERT="+e.certs.ClientCert, "JOBWIRE_TLS_KEY="+e.certs.ClientKey)
	}
	e.startWorker(e.lang.name+"-1", append(tls, "JOBWIRE_TOKEN="+res.GetToken())...)
	id := e.enqueue("echo", []byte(`{"over":"tls"}`))
	e.waitState(id, job.StateSucceeded)

	intruder := e.startWorker(e.lang.name+"-intruder", append(tls, "JOBWIRE_TOKEN=jw_0000000000000000_made-up-secret")...)
	if _, code := intruder.waitExit(e.t, 20*time.Second); code == 0 {
		e.t.Errorf("a worker with a made-up token exited 0; want a failure")
	}
}
