package config

import (
	"strings"
	"testing"
	"time"
)

func TestRetention(t *testing.T) {
	t.Parallel()
	cfg, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Broker.Retention; r.Succeeded != 168*time.Hour || r.Dead != 720*time.Hour || r.Audit != 2160*time.Hour {
		t.Fatalf("default retention = %+v, want 168h, 720h and 2160h", r)
	}
	cfg, err = Parse([]byte("retention: {succeeded: 24h, dead: 2160h, audit: 8760h}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Broker.Retention; r.Succeeded != 24*time.Hour || r.Dead != 2160*time.Hour || r.Audit != 8760*time.Hour {
		t.Fatalf("retention = %+v, want 24h, 2160h and 8760h", r)
	}
	tests := []struct{ doc, want string }{
		{"retention: {succeeded: 0s}", "retention.succeeded must be at least 1m, got 0s"},
		{"retention: {dead: -1h}", "retention.dead must be at least 1m, got -1h0m0s"},
		{"retention: {audit: 30s}", "retention.audit must be at least 1m, got 30s"},
		{"retention: {kept: 1h}", `unknown key "kept" in retention`},
	}
	for _, tt := range tests {
		if _, err := Parse([]byte(tt.doc)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tt.doc, err, tt.want)
		}
	}
}
