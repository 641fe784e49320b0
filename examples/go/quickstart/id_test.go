package main

import "testing"

// Two quickstart workers started side by side, as the README's PostgreSQL example starts one on
// each broker, get different ids unless told otherwise.
func TestDefaultIDsDiffer(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	host := func() (string, error) { return "box", nil }
	a, b := defaultID(none, host, 101), defaultID(none, host, 102)
	if a == b {
		t.Fatalf("two worker processes both get the id %q", a)
	}
	if a != "quickstart-box-101" {
		t.Errorf("defaultID = %q, want quickstart-box-101", a)
	}
	env := func(k string) string {
		if k == "JOBWIRE_WORKER_ID" {
			return "mailer-1"
		}
		return ""
	}
	if got := defaultID(env, host, 101); got != "mailer-1" {
		t.Errorf("with JOBWIRE_WORKER_ID=mailer-1, defaultID = %q", got)
	}
}
