package main

import (
	"testing"
	"time"
)

func TestRoundDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   time.Duration
		want string
	}{
		{398985177068 * time.Nanosecond, "6m39s"},
		{time.Minute, "1m"},
		{time.Hour, "1h"},
		{90 * time.Minute, "1h30m"},
		{time.Hour + 2*time.Second, "1h0m2s"},
		{168 * time.Hour, "168h"},
		{2*time.Second + 3456789*time.Nanosecond, "2s"},
		{2*time.Second + 345678912*time.Nanosecond, "2.35s"},
		{12345678 * time.Nanosecond, "12.35ms"},
		{1234 * time.Nanosecond, "1.23µs"},
		{0, "0s"},
		{-90 * time.Second, "-1m30s"},
	}
	for _, tt := range tests {
		if got := roundDuration(tt.in); got != tt.want {
			t.Errorf("roundDuration(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
