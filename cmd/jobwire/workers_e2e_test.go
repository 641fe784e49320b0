package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jobwire/jobwire/internal/brokertest"
)

// jobwire workers shows what the dashboard's workers page shows, from the same RPC.
func TestWorkersAgainstRealBroker(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	if r := runReal(t, b.Addr, "workers"); r.code != 0 || !strings.Contains(r.stdout, "no workers connected") {
		t.Fatalf("no workers: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	b.Connect(brokertest.Hello("mailer-1", 4, "email.send"))
	r := runReal(t, b.Addr, "workers")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "WORKER") {
		t.Fatalf("want a header and one worker:\n%s", r.stdout)
	}
	for _, want := range []string{"mailer-1", "email.send", "(all)", "0/4"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("worker row lacks %q: %s", want, lines[1])
		}
	}

	r = runReal(t, b.Addr, "workers", "--json")
	var out struct {
		Workers []struct {
			WorkerID string   `json:"workerId"`
			JobTypes []string `json:"jobTypes"`
			Capacity int      `json:"capacity"`
		} `json:"workers"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("--json: %v\n%s", err, r.stdout)
	}
	if len(out.Workers) != 1 || out.Workers[0].WorkerID != "mailer-1" || out.Workers[0].Capacity != 4 {
		t.Fatalf("--json: %s", r.stdout)
	}
}
