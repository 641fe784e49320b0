package brokerset

import "testing"

func TestSpans(t *testing.T) {
	for _, tc := range []struct {
		target string
		want   bool
	}{
		{Target(Scheme(1), 2), true},
		{Target(Scheme(42), 5), true},
		{Target(Scheme(3), 1), false}, // one broker: a new stream comes back to it
		{"127.0.0.1:7070", false},
		{"dns:///jobwire.internal:7070", false},
		{"passthrough:///jobwire-brokers-1", false},
		{Scheme(4) + ":///brokers", false},
	} {
		if got := Spans(tc.target); got != tc.want {
			t.Errorf("Spans(%q) = %v, want %v", tc.target, got, tc.want)
		}
	}
}
