package main

import (
	"strings"
	"testing"

	"github.com/jobwire/jobwire/internal/brokertest"
)

// A batch made and filled from the CLI completes when closed after its jobs; list and get show
// its counts and callback; bad input is exit 2 with a sentence.
func TestBatchesAgainstRealBroker(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	run := func(want int, args ...string) string {
		t.Helper()
		r := runReal(t, b.Addr, args...)
		if r.code != want {
			t.Fatalf("jobwire %s: exit %d, want %d\n%s%s", strings.Join(args, " "), r.code, want, r.stdout, r.stderr)
		}
		return r.stdout + r.stderr
	}
	id := strings.TrimSpace(run(0, "batches", "create", "--description", "nightly import", "--on-complete", "report"))
	run(0, "enqueue", "--type", "row", "--batch", id)
	w := b.Connect(brokertest.Hello("w1", 1, "row", "report"))
	a := w.Assignment()
	w.Started(a)
	w.Report(brokertest.Ref(a), nil)
	if out := run(0, "batches", "close", id); !strings.Contains(out, "is COMPLETE: 1 of 1 jobs final") {
		t.Fatalf("close: %s", out)
	}
	if out := run(0, "batches", "list"); !strings.Contains(out, "COMPLETE") || !strings.Contains(out, "nightly import") {
		t.Fatalf("list:\n%s", out)
	}
	if out := run(0, "batches", "get", id); !strings.Contains(out, "report (job ") {
		t.Fatalf("get:\n%s", out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"batches", "get", "x"}, `batch id "x" is not a positive integer`},
		{[]string{"batches", "list", "--state", "done"}, `--state "done" is not a batch state`},
		{[]string{"enqueue", "--type", "row", "--batch", "-1"}, "--batch -1 is not a positive batch id"},
	} {
		if out := run(2, c.args...); !strings.Contains(out, c.want) {
			t.Errorf("%v: %s, want %q", c.args, out, c.want)
		}
	}
	if out := run(1, "enqueue", "--type", "row", "--batch", id); !strings.Contains(out, "closed") {
		t.Errorf("enqueue into a closed batch: %s", out)
	}
}
