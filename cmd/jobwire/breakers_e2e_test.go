package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jobwire/jobwire/breaker"
	jobwirebroker "github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// These tests run the breakers commands against a real broker on loopback, through run, the
// same entry point main uses.

// runReal runs one command line against the broker at addr.
func runReal(t *testing.T, addr string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), append(args, "--addr", addr), &stdout, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// realBreaker reads typ's breaker over the admin API.
func realBreaker(t *testing.T, b *brokertest.Bundle, typ string) *jobwirev1.BreakerInfo {
	t.Helper()
	res, err := b.Admin.ListBreakers(context.Background(), &jobwirev1.ListBreakersRequest{})
	if err != nil {
		t.Fatalf("list breakers: %v", err)
	}
	for _, br := range res.GetBreakers() {
		if br.GetType() == typ {
			return br
		}
	}
	t.Fatalf("no breaker for %q", typ)
	return nil
}

func TestBreakersCommandsAgainstRealBroker(t *testing.T) {
	t.Parallel()
	c := breaker.CountConfig()
	c.Threshold = 2
	b := brokertest.New(t, brokertest.Options{Breakers: &jobwirebroker.BreakerOptions{
		Default: c, PerType: map[string]breaker.Config{"audit": {Disabled: true}}}})
	ctx := context.Background()
	enqueue := func() int64 {
		res, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "charge"}})
		if err != nil {
			t.Fatalf("enqueue: %v", err)
		}
		return res.GetJob().GetId()
	}

	if r := runReal(t, b.Addr, "breakers", "list"); r.code != 0 || !strings.Contains(r.stdout, "audit") {
		t.Fatalf("list before any failure: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Two failures open the breaker of "charge".
	w := b.Connect(brokertest.Hello("w1", 1, "charge"))
	for range 2 {
		enqueue()
		a := w.Assignment()
		w.Started(a)
		if ack := w.Fail(a, brokertest.Transient("ConnectionRefused", 0)).GetResultAck(); ack == nil {
			t.Fatal("expected a result ack")
		}
	}
	held := enqueue()

	r := runReal(t, b.Addr, "breakers", "list")
	wantOK(t, r)
	opened := brokertest.Start.Format(time.RFC3339)
	nextProbe := brokertest.Start.Add(c.OpenFor).Format(time.RFC3339)
	wantContains(t, r.stdout, "TYPE", "STATE", "FAILURES", "OPENED", "NEXT PROBE")
	wantContains(t, r.stdout, "charge", "OPEN", "2", opened, nextProbe)
	// Why it opened: the window's numbers and the failures that did it.
	wantContains(t, r.stdout, "charge opened at "+opened+": 2 failures within",
		"transient  "+opened+"  ConnectionRefused: dependency unavailable")

	r = runReal(t, b.Addr, "breakers", "list", "--json")
	wantOK(t, r)
	m := decodeJSON(t, r.stdout)
	list, _ := m["breakers"].([]any)
	var charge map[string]any
	for _, x := range list {
		if br, _ := x.(map[string]any); br["type"] == "charge" {
			charge = br
		}
	}
	if charge == nil || charge["state"] != "open" || charge["failuresInWindow"] != float64(2) {
		t.Fatalf("list --json: %s", r.stdout)
	}

	// Reset closes it: the held job goes out at once.
	r = runReal(t, b.Addr, "breakers", "reset", "charge")
	wantOK(t, r)
	wantContains(t, r.stdout, "charge", "CLOSED", "0")
	wantContains(t, r.stdout, "reset at "+opened)
	if strings.Contains(r.stdout, "opened at") {
		t.Fatalf("a reset breaker still shows why it opened:\n%s", r.stdout)
	}
	if br := realBreaker(t, b, "charge"); br.GetState() != jobwirev1.BreakerState_BREAKER_STATE_CLOSED || br.GetFailuresInWindow() != 0 {
		t.Fatalf("after reset: %v", br)
	}
	if a := w.Assignment(); a.GetJob().GetId() != held {
		t.Fatalf("after reset, assigned job %d, want %d", a.GetJob().GetId(), held)
	}

	for _, tc := range []struct {
		arg  string
		want jobwirev1.BreakerState
	}{
		{"open", jobwirev1.BreakerState_BREAKER_STATE_OPEN},
		{"half-open", jobwirev1.BreakerState_BREAKER_STATE_HALF_OPEN},
		{"closed", jobwirev1.BreakerState_BREAKER_STATE_CLOSED},
	} {
		r := runReal(t, b.Addr, "breakers", "force", "charge", tc.arg)
		wantOK(t, r)
		wantContains(t, r.stdout, "charge", enumName(tc.want))
		if br := realBreaker(t, b, "charge"); br.GetState() != tc.want {
			t.Fatalf("after force %s: %v", tc.arg, br)
		}
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"reset without a type", []string{"breakers", "reset"}, 2, ""},
		{"force to no state", []string{"breakers", "force", "charge", "sideways"}, 2, "sideways"},
		{"reset a disabled breaker", []string{"breakers", "reset", "audit"}, 1, "disabled"},
	} {
		r := runReal(t, b.Addr, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d mentioning %q", tc.name, r.code, r.stderr, tc.code, tc.want)
		}
	}
}
