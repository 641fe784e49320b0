package main

import (
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// audit list shows who did what against a real broker with auth on, filters by action, actor
// and time, and refuses a bad filter with exit status 2.
func TestAuditListAgainstRealBroker(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{RequireAuth: true})
	admin := b.AdminToken
	viewer := b.Token(auth.RoleViewer, auth.Scope{})
	p, err := b.Auth.Verify(t.Context(), admin)
	if err != nil {
		t.Fatal(err)
	}
	wantOK(t, runReal(t, b.Addr, "queues", "pause", "mail", "--token", admin))
	wantOK(t, runReal(t, b.Addr, "queues", "set-limit", "mail", "4", "--token", admin))

	r := runReal(t, b.Addr, "audit", "list", "--token", viewer)
	wantOK(t, r)
	at := brokertest.Start.Format(time.RFC3339)
	wantContains(t, r.stdout, "ID", "TIME", "ACTOR", "TOKEN", "SOURCE", "PEER", "ACTION", "TARGET", "JOBS", "DETAIL", "BROKER")
	wantContains(t, r.stdout, at, "test admin", p.TokenID, "api", "127.0.0.1:", "queue.limit", "mail", "0", "limit=4", "-")
	wantContains(t, r.stdout, at, "test admin", p.TokenID, "api", "127.0.0.1:", "queue.pause", "mail")

	r = runReal(t, b.Addr, "audit", "list", "--action", "queue.pause", "--actor", "test admin", "--limit", "1",
		"--after", brokertest.Start.Add(-time.Second).Format(time.RFC3339), "--before", brokertest.Start.Add(time.Second).Format(time.RFC3339),
		"--json", "--token", viewer)
	wantOK(t, r)
	m := decodeJSON(t, r.stdout)
	evs, _ := m["events"].([]any)
	if len(evs) != 1 {
		t.Fatalf("--action queue.pause --limit 1: %d events\n%s", len(evs), r.stdout)
	}
	ev := evs[0].(map[string]any)
	if ev["action"] != "queue.pause" || ev["target"] != "mail" || ev["actorTokenId"] != p.TokenID || ev["source"] != "api" {
		t.Errorf("event %v, want the pause of mail by token %s over the API", ev, p.TokenID)
	}

	r = runReal(t, b.Addr, "audit", "list", "--before", brokertest.Start.Format(time.RFC3339), "--token", viewer)
	wantOK(t, r)
	wantContains(t, r.stdout, "no audit events match")

	r = runReal(t, b.Addr, "audit", "list", "--action", "queue.drop", "--token", viewer)
	if r.code != 2 {
		t.Fatalf("--action queue.drop: exit %d, want 2\n%s", r.code, r.stderr)
	}
	wantContains(t, r.stderr, "action: must be one of", "queue.pause")
	r = runReal(t, b.Addr, "audit", "list", "--since", "1h", "--after", "2030-01-02T15:04:05Z")
	if r.code != 2 {
		t.Fatalf("--since with --after: exit %d, want 2\n%s", r.code, r.stderr)
	}
	wantContains(t, r.stderr, "give --since or --after, not both")
}
