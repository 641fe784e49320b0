package percentile

import (
	"testing"
	"time"
)

func TestNearestRank(t *testing.T) {
	t.Parallel()
	hundred := make([]int64, 100)
	for i := range hundred {
		hundred[i] = int64(i + 1)
	}
	tests := []struct {
		name   string
		sorted []int64
		p      float64
		want   int64
	}{
		{"one sample", []int64{7}, 99, 7},
		{"median of 1..100", hundred, 50, 50},
		{"p99 of 1..100", hundred, 99, 99},
		{"p100 is the max", hundred, 100, 100},
		{"p0 is the min", hundred, 0, 1},
		{"p99 of two", []int64{1, 2}, 99, 2},
		{"median of three", []int64{1, 2, 3}, 50, 2},
	}
	for _, tt := range tests {
		if got := NearestRank(tt.sorted, tt.p); got != tt.want {
			t.Errorf("%s: NearestRank(p%v) = %d, want %d", tt.name, tt.p, got, tt.want)
		}
	}
	// The soak test reads durations.
	if got := NearestRank([]time.Duration{time.Millisecond, time.Second}, 50); got != time.Millisecond {
		t.Errorf("durations: p50 = %v, want 1ms", got)
	}
}
