package ratelimit

import (
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestBurstThenSteadyRate(t *testing.T) {
	l := Limit{Rate: 10, Per: time.Second, Burst: 3}
	var b Bucket
	for i := range 3 {
		var ok bool
		if b, ok = l.Take(b, t0); !ok {
			t.Fatalf("start %d of the burst refused", i+1)
		}
	}
	if _, ok := l.Take(b, t0); ok {
		t.Fatal("a fourth start at once went through a burst of 3")
	}
	next := l.NextAt(b, t0)
	if want := t0.Add(100 * time.Millisecond); !next.Equal(want) {
		t.Fatalf("NextAt = %s, want %s", next, want)
	}
	if _, ok := l.Take(b, next.Add(-1)); ok {
		t.Fatal("a start 1ns before NextAt went through")
	}
	if _, ok := l.Take(b, next); !ok {
		t.Fatal("a start at NextAt was refused")
	}
}

func TestIdleBucketRefillsToBurstOnly(t *testing.T) {
	l := Limit{Rate: 5, Per: time.Second, Burst: 2}
	b, _ := l.Take(Bucket{}, t0)
	if got := l.Allowance(b, t0.Add(time.Hour)); got != 2 {
		t.Fatalf("allowance after an idle hour = %d, want the burst, 2", got)
	}
}

// TestNeverMoreThanBurstPlusRatePerWindow takes greedily at random moments and checks the
// defining bound: over any window of length w, at most Burst + w/Emission starts.
func TestNeverMoreThanBurstPlusRatePerWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		l := Limit{Rate: 1 + rng.IntN(50), Per: time.Duration(1+rng.IntN(2000)) * time.Millisecond, Burst: 1 + rng.IntN(10)}
		var b Bucket
		now := t0
		var starts []time.Time
		for range 500 {
			now = now.Add(time.Duration(rng.Int64N(int64(l.Emission()) * 2)))
			for {
				nb, ok := l.Take(b, now)
				if !ok {
					break
				}
				b = nb
				starts = append(starts, now)
			}
		}
		for i := range starts {
			for j := i; j < len(starts); j++ {
				w := starts[j].Sub(starts[i])
				if max := l.Burst + int(w/l.Emission()); j-i+1 > max {
					t.Fatalf("%s: %d starts within %s, at most %d allowed", l, j-i+1, w, max)
				}
			}
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		l  Limit
		ok bool
	}{
		{Limit{Rate: 50, Per: time.Second, Burst: 50}, true},
		{Limit{Rate: 0, Per: time.Second, Burst: 1}, false},
		{Limit{Rate: 1, Per: 0, Burst: 1}, false},
		{Limit{Rate: 1, Per: time.Second, Burst: 0}, false},
	} {
		if err := tc.l.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok %v", tc.l, err, tc.ok)
		}
	}
}

func TestKeyClash(t *testing.T) {
	a := Rule{Name: "a", Type: "sync", Key: "payload.customer"}
	for _, c := range []struct {
		name  string
		b     Rule
		clash bool
	}{
		{"another key over the same jobs", Rule{Name: "b", Key: "metadata.tenant"}, true},
		{"the same key", Rule{Name: "b", Key: "payload.customer"}, false},
		{"unkeyed", Rule{Name: "b"}, false},
		{"other jobs", Rule{Name: "b", Type: "mail", Key: "metadata.tenant"}, false},
		{"the same limit changed", Rule{Name: "a", Key: "metadata.tenant"}, false},
	} {
		if got := KeyClash(&a, &c.b); got != c.clash {
			t.Errorf("%s: KeyClash = %v, want %v", c.name, got, c.clash)
		}
		if got := KeyClash(&c.b, &a); got != c.clash {
			t.Errorf("%s, the other way round: KeyClash = %v, want %v", c.name, got, c.clash)
		}
	}
}
