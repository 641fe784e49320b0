package config

import (
	"strings"
	"testing"

	"github.com/jobwire/jobwire/broker"
)

func TestConcurrencyRulesFromTheFile(t *testing.T) {
	cfg, err := Parse([]byte(`concurrency:
  - name: sync-per-customer
    type: customer.sync
    key: payload.customer_id
    max_running: 1
`))
	if err != nil {
		t.Fatal(err)
	}
	want := broker.ConcurrencyRule{Name: "sync-per-customer", Type: "customer.sync", Key: "payload.customer_id", MaxRunning: 1}
	if len(cfg.Broker.Concurrency) != 1 || cfg.Broker.Concurrency[0] != want {
		t.Fatalf("rules %+v, want %+v", cfg.Broker.Concurrency, want)
	}
	for _, tc := range []struct{ doc, want string }{
		{"concurrency:\n  - name: a\n    key: payload.\n    max_running: 1\n", "empty field name"},
		{"concurrency:\n  - name: a\n    key: type\n    max_running: 0\n", "max running must be at least 1"},
		{"concurrency:\n  - name: a\n    key: type\n    max_running: 1\n  - name: a\n    key: queue\n    max_running: 2\n", `"a" is used twice`},
		{"concurrency:\n  - name: a\n    kye: type\n", `unknown key "kye"`},
	} {
		if _, err := Parse([]byte(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error saying %s", tc.doc, err, tc.want)
		}
	}
}
