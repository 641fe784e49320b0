package config

import (
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
breaker: {threshold: 3, count: [fatal, timeout]}
job_types:
  email.send:
    retry: {max_attempts: 9}
    breaker: {disabled: true}
storage: {max_transient_retries: 5, command_timeout: 2s}
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
	if cfg.Storage.MaxTransientRetries != 5 || cfg.Storage.CommandTimeout != 2*time.Second || cfg.Storage.TransientRetryBaseDelay != 200*time.Millisecond {
		t.Fatalf("storage: %+v", cfg.Storage)
	}
}

func TestParseRejectsBadValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		doc  string
		want string
	}{
		{"lease_duraton: 3s", "field lease_duraton not found"},
		{"durability: fast", `durability must be normal or full, got "fast"`},
		{"lease_duration: 10s\nheartbeat_interval: 20s", "heartbeat_interval must be positive and shorter than lease_duration"},
		{"retry: {multiplier: 0.5}", "multiplier must be a finite number >= 1"},
		{"retry: {base_delay: soon}", "cannot unmarshal"},
		{"breaker: {count: [sometimes]}", `count: "sometimes" is not one of`},
		{"storage: {command_timeout: 0s}", "CommandTimeout must be positive"},
		{"max_payload_bytes: -1", "max_payload_bytes must be 1.."},
		{"log_level: loud", `log_level must be debug, info, warn or error, got "loud"`},
		{"job_types: {t: {retry: {max_attempts: 0}}}", `retry for job type "t": max_attempts must be 1..1000, got 0`},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.doc))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tt.doc, err, tt.want)
		}
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
