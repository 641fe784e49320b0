package main

import (
	"strings"
	"testing"
)

// The schedules commands against a real broker: add, list, get, update, pause with a note,
// trigger, backfill, resume, remove; bad input exits 2 with a sentence.
func TestE2ESchedules(t *testing.T) {
	t.Parallel()
	b := e2eBroker(t)
	out := e2eOK(t, b, "schedules", "add", "nightly", "--cron", "0 2 * * *", "--time-zone", "Europe/Paris", "--type", "report",
		"--payload", `{"days":7}`, "--overlap", "buffer-one", "--catch-up", "all", "--metadata", "team=billing", "--jitter", "30s")
	e2eContains(t, "add", out, "schedule nightly added; it fires next at 2026-03-02T01:00:00Z")
	e2eContains(t, "list", e2eOK(t, b, "schedules", "list"), "nightly", "0 2 * * * (Europe/Paris)", "active", "2026-03-02T01:00:00Z")
	e2eContains(t, "update", e2eOK(t, b, "schedules", "update", "nightly", "--cron", "30 2 * * *"), "fires next at 2026-03-02T01:30:00Z")
	get := e2eOK(t, b, "schedules", "get", "nightly")
	e2eContains(t, "get", get, "buffer-one", "all within 24h", "30s", "report")
	e2eContains(t, "pause", e2eOK(t, b, "schedules", "pause", "nightly", "--note", "quarter close"), "is paused")
	e2eContains(t, "get paused", e2eOK(t, b, "schedules", "get", "nightly"), "paused: quarter close")
	id := strings.TrimSpace(e2eOK(t, b, "schedules", "trigger", "nightly"))
	e2eContains(t, "list after trigger", e2eOK(t, b, "schedules", "list"), "paused", id, "SCHEDULED")
	e2eContains(t, "backfill", e2eOK(t, b, "schedules", "backfill", "nightly", "--from", "2026-02-26T00:00:00Z", "--to", "2026-03-01T00:00:00Z"),
		"enqueued 3 occurrences; 0 occurrences of the range")
	e2eContains(t, "resume", e2eOK(t, b, "schedules", "resume", "nightly"), "is active")
	e2eContains(t, "json", e2eOK(t, b, "schedules", "get", "nightly", "--json"), `"name": "nightly"`)
	e2eContains(t, "remove", e2eOK(t, b, "schedules", "remove", "nightly"), "removed")
	e2eContains(t, "empty list", e2eOK(t, b, "schedules", "list"), "no schedules yet")

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"schedules", "add", "x", "--type", "t"}, "--cron and --type are required"},
		{[]string{"schedules", "add", "x", "--cron", "* * *", "--type", "t"}, "5 fields"},
		{[]string{"schedules", "add", "x", "--cron", "@daily", "--type", "t", "--overlap", "never"}, "unknown --overlap \"never\"; want one of skip, buffer-one"},
		{[]string{"schedules", "add", "x", "--cron", "@daily", "--type", "t", "--payload", "{"}, "--payload is not valid JSON"},
		{[]string{"schedules", "add", "x", "--cron", "@daily", "--type", "t", "--metadata", "novalue"}, "KEY=VALUE"},
		{[]string{"schedules", "update", "x"}, "nothing to change"},
		{[]string{"schedules", "backfill", "x", "--from", "2026-02-26T00:00:00Z"}, "--from and --to are required"},
		{[]string{"schedules", "backfill", "x", "--from", "2026-02-26T00:00:00Z", "--to", "2026-02-25T00:00:00Z"}, "is not before"},
		{[]string{"schedules", "pause"}, "schedule name"},
	} {
		code, _, errOut := e2eRun(t, b, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("jobwire %s: exit %d, stderr %q; want 2 naming %q", strings.Join(c.args, " "), code, errOut, c.want)
		}
	}
	code, _, errOut := e2eRun(t, b, "schedules", "trigger", "nope")
	if code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("trigger of a missing schedule: exit %d, stderr %q; want 1 saying not found", code, errOut)
	}
}
