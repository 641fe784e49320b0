package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobwire/jobwire/breaker"
)

func TestParseOverridesDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(`
listen: 0.0.0.0:9000
durability: full
lease_duration: 12s
always_fatal: [KeyError]
retry: {base_delay: 1s, max_attempts: 6}
breaker: {mode: count, threshold: 3, count: [fatal, timeout]}
job_types:
  email.send:
    retry: {max_attempts: 9}
    breaker: {disabled: true}
storage: {max_transient_retries: 5, command_timeout: 2s, leader_timeout: 9s}
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "0.0.0.0:9000" || !cfg.FullSync || cfg.DB != "./jobwire.db" {
		t.Fatalf("top level: %+v", cfg)
	}
	if cfg.Broker.LeaseDuration != 12*time.Second || cfg.Broker.HeartbeatInterval != 4*time.Second {
		t.Fatalf("lease %s heartbeat %s; the heartbeat should default to a third of the lease", cfg.Broker.LeaseDuration, cfg.Broker.HeartbeatInterval)
	}
	if cfg.Broker.Retry.Base != time.Second || cfg.Broker.Retry.MaxAttempts != 6 || cfg.Broker.Retry.Multiplier != 2 {
		t.Fatalf("retry: %+v", cfg.Broker.Retry)
	}
	// A type's override starts from the file's default policy, not the built-in one.
	if p := cfg.Broker.RetryByType["email.send"]; p.MaxAttempts != 9 || p.Base != time.Second {
		t.Fatalf("email.send retry: %+v", p)
	}
	if c := cfg.Breakers.Default; c.Threshold != 3 || c.Count != breaker.KindsOf(breaker.Fatal, breaker.Timeout) {
		t.Fatalf("breaker: %+v", c)
	}
	if c := cfg.Breakers.PerType["email.send"]; !c.Disabled || c.Threshold != 3 {
		t.Fatalf("email.send breaker: %+v", c)
	}
	if c := cfg.Breakers.Default; c.Mode != breaker.ModeCount {
		t.Fatalf("breaker mode %v, want count", c.Mode)
	}
	if cfg.Storage.MaxTransientRetries != 5 || cfg.Storage.CommandTimeout != 2*time.Second || cfg.Storage.TransientRetryBaseDelay != 200*time.Millisecond {
		t.Fatalf("storage: %+v", cfg.Storage)
	}
	if cfg.LeaderTimeout != 9*time.Second {
		t.Fatalf("leader timeout %s, want 9s", cfg.LeaderTimeout)
	}
}

// Every mistake is one sentence in the file's terms, on the line it is on: no Go types, no
// Go field names, no yaml package internals.
func TestParseRejectsBadValuesInOneSentenceEach(t *testing.T) {
	t.Parallel()
	tests := []struct {
		doc  string
		want string // the whole error
	}{
		{"listen: 127.0.0.1:7070\nlog_level: info\nretyr: {max_attempts: 3}", `line 3: unknown key "retyr" (did you mean "retry"?)`},
		{"lease_duraton: 3s", `line 1: unknown key "lease_duraton" (did you mean "lease_duration"?)`},
		{"retry:\n  bse_delay: 3s", `line 2: unknown key "bse_delay" in retry (did you mean "base_delay"?)`},
		{"retention: {kept: 1h}", `line 1: unknown key "kept" in retention (known keys: audit, dead, succeeded)`},
		{"frobnicate: 1", `line 1: unknown key "frobnicate"`},
		{"job_types:\n  email.send:\n    breakr: {}", `line 3: unknown key "breakr" in job_types.email.send (did you mean "breaker"?)`},
		{"job_types:\n  email.send:\n    retry: {max_attempts: 0}\n    breaker:\n      min_calls: 0", "line 3: job_types.email.send.retry.max_attempts must be 1..1000, got 0\n" +
			"line 5: job_types.email.send.breaker.min_calls must be at least 1, got 0"},
		{"lease_duration: 30", "line 1: lease_duration: 30 is not a duration (write 30s)"},
		{"retry: {base_delay: soon}", `line 1: retry.base_delay: "soon" is not a duration (write e.g. 30s, 5m or 1h)`},
		{"retry: {max_attempts: many}", `line 1: retry.max_attempts: "many" is not a whole number`},
		{"retry: {multiplier: fast}", `line 1: retry.multiplier: "fast" is not a number`},
		{"breaker: {disabled: maybe}", `line 1: breaker.disabled: "maybe" is not true or false`},
		{"retry: 3", "line 1: retry must be a mapping of keys, not a single value"},
		{"always_fatal: KeyError", "line 1: always_fatal must be a list such as [a, b], not a single value"},
		{"listen: [a, b]", "line 1: listen must be a single value, not a list"},
		{"listen: a\nlisten: b", `line 2: key "listen" appears twice (first on line 1)`},
		{"listen: a\n  b: c", "line 2: not valid YAML: mapping values are not allowed in this context"},
		{"durability: fast", `line 1: durability must be normal or full, got "fast"`},
		{"lease_duration: 10s\nheartbeat_interval: 20s", "line 2: heartbeat_interval must be positive and shorter than lease_duration (10s), got 20s"},
		{"retry: {multiplier: 0.5}", "line 1: retry.multiplier must be a finite number >= 1, got 0.5"},
		{"breaker:\n  count: [sometimes]", `line 2: breaker.count: "sometimes" is not one of transient, fatal, lease_expired, timeout`},
		{"breaker:\n  mode: count\n  threshold: 0", "line 3: breaker.threshold must be at least 1, got 0"},
		{"breaker:\n  mode: sometimes", `line 2: breaker.mode: "sometimes" is not ratio or count`},
		{"breaker:\n  failure_ratio: 1.5", "line 2: breaker.failure_ratio must be above 0 and at most 1, got 1.5"},
		{"breaker:\n  failure_ratio: half", `line 2: breaker.failure_ratio: "half" is not a number`},
		{"breaker:\n  sampling_window: 1ms", "line 2: breaker.sampling_window must be at least 10ms, got 1ms"},
		{"breaker:\n  threshold: 3", "line 2: breaker.threshold: applies to mode count only, and this breaker's mode is ratio (set mode: count, or use failure_ratio, min_calls and sampling_window)"},
		{"breaker: {mode: count}\njob_types:\n  pay:\n    breaker: {min_calls: 5}", "line 4: job_types.pay.breaker.min_calls: applies to mode ratio only, and this breaker's mode is count (set mode: ratio, or use threshold and window)"},
		{"breaker: {count: [], open_on_fatal: false}", "line 1: breaker.count is empty and open_on_fatal is false, so the breaker could never open; set disabled instead"},
		{"storage:\n  command_timeout: 0s", "line 2: storage.command_timeout must be positive, got 0s"},
		{"storage: {max_transient_retries: -1}", "line 1: storage.max_transient_retries must be zero or more, got -1"},
		{"storage:\n  leader_timeout: 2s", "line 2: storage.leader_timeout must be at least 3s (three election intervals), got 2s"},
		{"max_payload_bytes: -1", "line 1: max_payload_bytes must be 1..67108864, got -1"},
		{"log_level: loud", `line 1: log_level must be debug, info, warn or error, got "loud"`},
		{"retention: {succeeded: 0s}", "line 1: retention.succeeded must be at least 1m, got 0s"},
		{"http_listen: 7071", `line 1: http_listen must be host:port (such as 127.0.0.1:7071) or off, got "7071"`},
		{"metrics: maybe", `line 1: metrics: "maybe" is not true or false`},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.doc))
		if err == nil || err.Error() != tt.want {
			t.Errorf("Parse(%q) = %v\nwant %s", tt.doc, err, tt.want)
		}
		if err != nil && (strings.Contains(err.Error(), "config.") || strings.Contains(err.Error(), "time.Duration") || strings.Contains(err.Error(), "!!")) {
			t.Errorf("Parse(%q) speaks Go or yaml internals: %v", tt.doc, err)
		}
	}
}

func TestLoadNamesTheFileOnEveryLine(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "jobwire.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:7070\nretyr: {}\nlease_duration: 30\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	want := path + ` line 2: unknown key "retyr" (did you mean "retry"?)` + "\n" + path + " line 3: lease_duration: 30 is not a duration (write 30s)"
	if err == nil || err.Error() != want {
		t.Errorf("Load() = %v\nwant %s", err, want)
	}
	_, err = Load(filepath.Join(t.TempDir(), "missing.yaml"))
	if err == nil || !strings.HasSuffix(err.Error(), "missing.yaml: no such file or directory") {
		t.Errorf("Load(missing) = %v", err)
	}
}

// Keys given through a YAML anchor and alias, and empty values, are read like any other.
func TestParseAcceptsAliasesAndEmptyValues(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte("retry: &r {max_attempts: 6}\njob_types:\n  a: {retry: *r}\nlease_duration:\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Broker.RetryByType["a"].MaxAttempts != 6 || cfg.Broker.LeaseDuration != 30*time.Second {
		t.Fatalf("retry by type %+v, lease %s", cfg.Broker.RetryByType, cfg.Broker.LeaseDuration)
	}
}

func TestEmptyFileIsDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := Defaults(); cfg.Listen != d.Listen || cfg.Broker.LeaseDuration != 30*time.Second || cfg.Broker.AttemptTimeout != 15*time.Minute {
		t.Fatalf("defaults: %+v", cfg)
	}
}

func TestHTTPListenerSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		doc         string
		listen      string
		metrics     bool
		metricsAuth bool
	}{
		{"", DefaultHTTPListen, true, false},
		{"http_listen: off", HTTPOff, true, false},
		{"http_listen: ':9100'\nmetrics: false", ":9100", false, false},
		{"metrics_auth: true", DefaultHTTPListen, true, true},
	}
	for _, tt := range tests {
		cfg, err := Parse([]byte(tt.doc))
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.doc, err)
		}
		if cfg.HTTPListen != tt.listen || cfg.Metrics != tt.metrics || cfg.MetricsAuth != tt.metricsAuth {
			t.Errorf("Parse(%q): http_listen %q metrics %v metrics_auth %v, want %q %v %v", tt.doc,
				cfg.HTTPListen, cfg.Metrics, cfg.MetricsAuth, tt.listen, tt.metrics, tt.metricsAuth)
		}
	}
}

func TestParseBreakerRatioDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(`
breaker: {failure_ratio: 0.25, min_calls: 40}
job_types:
  pay:
    breaker: {sampling_window: 2m}
  legacy:
    breaker: {mode: count, threshold: 7}
`))
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Breakers.Default; c.Mode != breaker.ModeRatio || c.FailureRatio != 0.25 || c.MinCalls != 40 ||
		c.SamplingWindow != 30*time.Second || c.Count != breaker.DefaultKinds {
		t.Fatalf("default breaker: %+v", c)
	}
	if c := cfg.Breakers.PerType["pay"]; c.Mode != breaker.ModeRatio || c.MinCalls != 40 || c.SamplingWindow != 2*time.Minute {
		t.Fatalf("pay breaker: %+v", c)
	}
	if c := cfg.Breakers.PerType["legacy"]; c.Mode != breaker.ModeCount || c.Threshold != 7 || c.Window != time.Minute {
		t.Fatalf("legacy breaker: %+v", c)
	}
}
