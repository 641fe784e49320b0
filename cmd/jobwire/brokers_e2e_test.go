package main

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jobwire/jobwire/internal/brokertest"
)

// jobwire brokers lists the brokers of the database: a broker alone lists itself, the leader,
// with its worker streams, as the one that answered.
func TestBrokersAgainstRealBroker(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	b.Connect(brokertest.Hello("w1", 1, "t"))
	r := runReal(t, b.Addr, "brokers")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") {
		t.Fatalf("want a header and one broker:\n%s", r.stdout)
	}
	header, fields := strings.Fields(lines[0]), strings.Fields(lines[1])
	if strings.Join(header, " ") != "ID ADDRESS HOST PID STARTED LAST SEEN LEADER ALIVE WORKERS ANSWERED" || len(fields) != 10 {
		t.Fatalf("unexpected table:\n%s", r.stdout)
	}
	if fields[0] != "-" || fields[3] != strconv.Itoa(os.Getpid()) || strings.Join(fields[6:], " ") != "true true 1 true" {
		t.Fatalf("the broker's row: %s", lines[1])
	}

	r = runReal(t, b.Addr, "brokers", "--json")
	var out struct {
		Brokers []struct {
			PID       int  `json:"pid"`
			Leader    bool `json:"leader"`
			Alive     bool `json:"alive"`
			Answering bool `json:"answering"`
			Workers   int  `json:"workers"`
		} `json:"brokers"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("--json: %v\n%s", err, r.stdout)
	}
	if len(out.Brokers) != 1 || out.Brokers[0].PID != os.Getpid() || !out.Brokers[0].Leader ||
		!out.Brokers[0].Alive || !out.Brokers[0].Answering || out.Brokers[0].Workers != 1 {
		t.Fatalf("--json: %s", r.stdout)
	}
}
