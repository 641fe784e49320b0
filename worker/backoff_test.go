package worker

import (
	"testing"
	"time"
)

func TestBackoffCeiling(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		b    Backoff
		n    int
		want time.Duration
	}{
		{name: "default first", n: 0, want: 100 * time.Millisecond},
		{name: "default doubles", n: 3, want: 800 * time.Millisecond},
		{name: "default caps", n: 6, want: 5 * time.Second},
		{name: "huge n does not overflow", n: 1000, want: 5 * time.Second},
		{name: "negative n is the first", n: -1, want: 100 * time.Millisecond},
		{name: "custom", b: Backoff{Base: time.Second, Max: 3 * time.Second}, n: 1, want: 2 * time.Second},
		{name: "custom caps", b: Backoff{Base: time.Second, Max: 3 * time.Second}, n: 2, want: 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.b.Ceiling(tt.n); got != tt.want {
				t.Errorf("Ceiling(%d) = %v, want %v", tt.n, got, tt.want)
			}
		})
	}
}

func TestBackoffDelayIsFullJitter(t *testing.T) {
	t.Parallel()
	for _, r := range []float64{0, 0.25, 0.999} {
		b := Backoff{Rand: func() float64 { return r }}
		want := time.Duration(r * float64(800*time.Millisecond))
		if got := b.Delay(3); got != want {
			t.Errorf("rand %v: Delay(3) = %v, want %v", r, got, want)
		}
	}
	var b Backoff
	for range 100 {
		if d := b.Delay(2); d < 0 || d >= 400*time.Millisecond {
			t.Fatalf("Delay(2) = %v, want in [0, 400ms)", d)
		}
	}
}
