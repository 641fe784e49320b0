package retry

import (
	"testing"
	"time"
)

func TestDelayFollowsTheFormula(t *testing.T) {
	t.Parallel()
	p := DefaultPolicy()
	tests := []struct {
		attempt int
		u       float64
		want    time.Duration
	}{
		{1, 0, 3 * time.Second},
		{1, 0.5, 3500 * time.Millisecond},
		{2, 0, 6 * time.Second},
		{3, 0.999, 12*time.Second + 999*time.Millisecond},
		{4, 0.25, 24*time.Second + 250*time.Millisecond},
		// 3s * 2^10 = 3072s is past the 1h cap? No: 3072s < 3600s, so the window is 1s.
		{11, 0.5, 3072*time.Second + 500*time.Millisecond},
		// 3s * 2^11 = 6144s: capped at 1h, and the window shrinks to 0 so jitter never passes the cap.
		{12, 0.9, time.Hour},
	}
	for _, tt := range tests {
		if got := p.Delay(tt.attempt, tt.u); got != tt.want {
			t.Errorf("Delay(%d, %v) = %s, want %s", tt.attempt, tt.u, got, tt.want)
		}
	}
}

func TestJitterWindowClippedNearTheCap(t *testing.T) {
	t.Parallel()
	p := Policy{Base: time.Second, Multiplier: 2, MaxDelay: 4500 * time.Millisecond, JitterMax: time.Second, MaxAttempts: 5, MaxJobAge: time.Hour}
	// attempt 3: capped = 4s, window = min(1s, 0.5s) = 0.5s.
	if got := p.JitterWindow(3); got != 500*time.Millisecond {
		t.Fatalf("JitterWindow(3) = %s, want 500ms", got)
	}
	if got := p.Delay(3, 0.5); got != 4250*time.Millisecond {
		t.Fatalf("Delay(3, 0.5) = %s, want 4.25s", got)
	}
}

func TestRetryAfterReplacesTheWaitButKeepsTheCap(t *testing.T) {
	t.Parallel()
	p := DefaultPolicy()
	if got := p.Wait(1, 0.9, 42*time.Second); got != 42*time.Second {
		t.Fatalf("Wait with retry-after 42s = %s", got)
	}
	if got := p.Wait(1, 0.9, 3*time.Hour); got != time.Hour {
		t.Fatalf("Wait with retry-after 3h = %s, want the 1h cap", got)
	}
	if got := p.Wait(2, 0, 0); got != 6*time.Second {
		t.Fatalf("Wait without retry-after = %s, want 6s", got)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*Policy)
		want   string
	}{
		{"base", func(p *Policy) { p.Base = 0 }, "base_delay must be positive, got 0s"},
		{"multiplier", func(p *Policy) { p.Multiplier = 0.5 }, "multiplier must be a finite number >= 1, got 0.5"},
		{"max delay", func(p *Policy) { p.MaxDelay = time.Second }, "max_delay (1s) must be at least base_delay (3s)"},
		{"jitter", func(p *Policy) { p.JitterMax = -1 }, "jitter_max must not be negative, got -1ns"},
		{"attempts", func(p *Policy) { p.MaxAttempts = 0 }, "max_attempts must be 1..1000, got 0"},
		{"age", func(p *Policy) { p.MaxJobAge = 0 }, "max_job_age must be positive, got 0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultPolicy()
			tt.mutate(&p)
			err := p.Validate()
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
	if err := DefaultPolicy().Validate(); err != nil {
		t.Fatalf("default policy invalid: %v", err)
	}
}
