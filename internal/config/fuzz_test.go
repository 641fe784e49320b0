package config

import (
	"testing"
)

// FuzzParse feeds arbitrary documents to Parse: it never panics, and a document it accepts
// gives a configuration the broker accepts too.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"",
		"listen: 127.0.0.1:7070\ndb: jobwire.db\n",
		"lease_duration: 30s\nheartbeat_interval: 10s\nmax_batch: 64\n",
		"retry:\n  base: 3s\n  multiplier: 2\n  max_attempts: 4\n",
		"breakers:\n  default:\n    threshold: 5\n",
		"retention:\n  succeeded: 24h\n  dead: 720h\n",
		"auth: true\n",
		"- a\n- b\n",
		"lease_duration: [1, 2]\n",
		"{",
		"\xff\xfe: 1\n",
		"a: &x [*x]\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			return
		}
		if err := cfg.Broker.Validate(); err != nil {
			t.Fatalf("Parse accepted %q, but the broker refuses its settings: %v", data, err)
		}
	})
}
