package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/config"
	"github.com/jobwire/jobwire/store/storeretry"
)

func TestServeStorageFlagsRejectBadValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"retries not a number", []string{"--max-transient-retries", "many"}, `--max-transient-retries must be a whole number, zero or more, got "many"`},
		{"retries negative", []string{"--max-transient-retries=-1"}, `--max-transient-retries must be a whole number, zero or more, got "-1"`},
		{"base delay not a duration", []string{"--transient-retry-base-delay", "soon"}, `--transient-retry-base-delay must be a duration such as 200ms, zero or more, got "soon"`},
		{"base delay negative", []string{"--transient-retry-base-delay=-5ms"}, "--transient-retry-base-delay must be a duration"},
		{"command timeout zero", []string{"--command-timeout", "0s"}, `--command-timeout must be a positive duration such as 30s, got "0s"`},
		{"command timeout without unit", []string{"--command-timeout", "30"}, `--command-timeout must be a positive duration such as 30s, got "30"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			e := &env{stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }, now: time.Now}
			// A case that wrongly passed validation would serve until this deadline and exit 0.
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			args := append([]string{"serve", "--listen", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "j.db")}, tt.args...)
			code := e.run(ctx, args)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr: %s", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tt.want)
			}
			if n := strings.Count(strings.TrimSpace(stderr.String()), "\n"); n != 0 {
				t.Errorf("stderr has %d extra lines, want one sentence: %q", n, stderr.String())
			}
		})
	}
}

func TestServeStorageFlagsOverrideConfig(t *testing.T) {
	t.Parallel()
	fromFile := storeretry.Options{MaxTransientRetries: 7, TransientRetryBaseDelay: time.Second, CommandTimeout: time.Minute}
	tests := []struct {
		name  string
		flags storageFlags
		want  storeretry.Options
	}{
		{"none set keeps the file's values", storageFlags{}, fromFile},
		{"all set", storageFlags{maxRetries: "0", baseDelay: "0s", commandTimeout: "250ms"},
			storeretry.Options{MaxTransientRetries: 0, TransientRetryBaseDelay: 0, CommandTimeout: 250 * time.Millisecond}},
		{"one set", storageFlags{baseDelay: "50ms"},
			storeretry.Options{MaxTransientRetries: 7, TransientRetryBaseDelay: 50 * time.Millisecond, CommandTimeout: time.Minute}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := config.Config{Storage: fromFile}
			if err := tt.flags.apply(&cfg); err != nil {
				t.Fatalf("apply() = %v", err)
			}
			if cfg.Storage != tt.want {
				t.Errorf("Storage = %+v, want %+v", cfg.Storage, tt.want)
			}
		})
	}
}
