package main

import (
	"strings"
	"testing"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// concurrency set sends the rule it was given and words what it now does; enqueue sends the
// producer's own key.
func TestConcurrencyCommands(t *testing.T) {
	t.Parallel()
	rule := &jobwirev1.ConcurrencyRule{Name: "sync", Type: "sync", Key: "payload.customer_id", MaxRunning: 1}
	fb := startBroker(t, map[string]handler{
		"SetConcurrencyRule":   reply(&jobwirev1.SetConcurrencyRuleResponse{Rule: rule}),
		"ListConcurrencyRules": reply(&jobwirev1.ListConcurrencyRulesResponse{Rules: []*jobwirev1.ConcurrencyRuleInfo{{Rule: rule, Keys: 3, KeysAtLimit: 1, Running: 2, Waiting: 40}}}),
		"Enqueue":              reply(&jobwirev1.EnqueueResponse{Job: &jobwirev1.EnqueuedJob{Id: 7}}),
	})
	env := map[string]string{envAddr: fb.addr}
	r := runCLI(t, env, "concurrency", "set", "sync", "--type", "sync", "--key", "payload.customer_id", "--max-running", "1")
	wantOK(t, r)
	assertProto(t, onlyRequest(t, fb, "SetConcurrencyRule"), &jobwirev1.SetConcurrencyRuleRequest{Rule: rule})
	wantContains(t, r.stdout, "rule sync: at most 1 running jobs of sync in queue any per key payload.customer_id")
	r = runCLI(t, env, "concurrency", "list")
	wantOK(t, r)
	wantContains(t, r.stdout, "RULE", "MAX RUNNING", "sync", "payload.customer_id", "40")
	wantOK(t, runCLI(t, env, "enqueue", "--type", "sync", "--concurrency-key", "acme", "--concurrency-limit", "2"))
	req := onlyRequest(t, fb, "Enqueue").(*jobwirev1.EnqueueRequest)
	if req.GetJob().GetConcurrencyKey() != "acme" || req.GetJob().GetConcurrencyLimit() != 2 {
		t.Errorf("enqueue sent key %q limit %d, want acme and 2", req.GetJob().GetConcurrencyKey(), req.GetJob().GetConcurrencyLimit())
	}
}

// Bad input exits 2 with a sentence, before anything is sent.
func TestConcurrencyCommandsRefuseBadInput(t *testing.T) {
	t.Parallel()
	fb := startBroker(t, map[string]handler{})
	env := map[string]string{envAddr: fb.addr}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"concurrency", "set", "x", "--max-running", "1"}, "--key is required"},
		{[]string{"concurrency", "set", "x", "--key", "payload.a"}, "--max-running 0 is outside 1..100000"},
		{[]string{"concurrency", "set", "x", "--key", "customer", "--max-running", "1"}, "--key: key \"customer\" is not one of"},
		{[]string{"concurrency", "set", "--key", "payload.a", "--max-running", "1"}, "missing rule name"},
		{[]string{"concurrency", "remove"}, "missing rule name"},
		{[]string{"enqueue", "--type", "t", "--concurrency-limit", "2"}, "--concurrency-limit needs --concurrency-key"},
		{[]string{"enqueue", "--type", "t", "--concurrency-key", "k"}, "--concurrency-limit must be 1..100000"},
	} {
		r := runCLI(t, env, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	if n := len(fb.requests("SetConcurrencyRule")) + len(fb.requests("Enqueue")); n != 0 {
		t.Errorf("%d requests sent for bad input, want none", n)
	}
}
