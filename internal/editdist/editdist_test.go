package editdist

import "testing"

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"stats", "stats", 0},
		{"", "abc", 3},
		{"stast", "stats", 1},   // a swap is one edit
		{"sattus", "status", 1}, // a swap is one edit
		{"lease_duraton", "lease_duration", 1},
		{"kitten", "sitting", 3},
		{"abc", "xyz", 3},
	} {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := Distance(c.b, c.a); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.b, c.a, got, c.want)
		}
	}
}
