package broker

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/sqlite"
	"github.com/jobwire/jobwire/store/sqlite/sqlitetest"
)

// keeperBundle is a breaker keeper on a real SQLite store and a fake clock, whose breakers'
// states a test sets.
type keeperBundle struct {
	k   *breakerKeeper
	st  store.Store
	clk *clock.Fake

	mu     sync.Mutex
	states []breaker.Saved
}

func newKeeperBundle(t *testing.T, shared bool) *keeperBundle {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlitetest.Path(t), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	kb := &keeperBundle{st: st, clk: clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))}
	kb.k = newBreakerKeeper(breakerKeeperConfig{st: st, clk: kb.clk, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		snapshot: func() []breaker.Saved {
			kb.mu.Lock()
			defer kb.mu.Unlock()
			return slices.Clone(kb.states)
		},
		encode: func(s breaker.Saved) (store.BreakerRecord, error) {
			data, err := json.Marshal(s)
			return store.BreakerRecord{Type: s.Type, Data: data}, err
		},
		shared:  func() bool { return shared },
		refresh: func(context.Context) error { return nil }})
	kb.k.Stored.Init()
	if err := kb.k.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kb.k.Stop()
		<-kb.k.Stopped()
	})
	return kb
}

func (kb *keeperBundle) set(states ...breaker.Saved) {
	kb.mu.Lock()
	defer kb.mu.Unlock()
	kb.states = states
}

// stored waits for the next write and returns the types it stored, sorted.
func (kb *keeperBundle) stored(t *testing.T) []string {
	t.Helper()
	recs, ok := kb.k.Stored.Wait(10 * time.Second)
	if !ok {
		t.Fatal("nothing was stored")
	}
	var types []string
	for _, r := range recs {
		types = append(types, r.Type)
	}
	slices.Sort(types)
	return types
}

// closed is typ's CLOSED breaker with n failures counted.
func closed(typ string, n int) breaker.Saved {
	s := breaker.Saved{Type: typ, State: breaker.StateClosed, Generation: 1}
	for i := range n {
		s.Failures = append(s.Failures, time.Date(2026, 3, 1, 0, 0, i, 0, time.UTC))
	}
	return s
}

func TestBreakerKeeperStoresFailuresTogetherWithinTheSaveDelay(t *testing.T) {
	t.Parallel()
	kb := newKeeperBundle(t, false)
	kb.set(closed("mail", 1), closed("sms", 0))
	kb.k.noteFailure("mail")
	kb.clk.Advance(breakerSaveDelay / 2)
	kb.set(closed("mail", 2), closed("sms", 1))
	kb.k.noteFailure("sms") // joins the save already armed
	kb.k.noteFailure("mail")
	if kb.k.Stored.Sent() {
		t.Fatal("stored before the save delay passed")
	}
	kb.clk.Advance(breakerSaveDelay / 2)
	if got := kb.stored(t); !slices.Equal(got, []string{"mail", "sms"}) {
		t.Fatalf("stored %v, want mail and sms in one write", got)
	}
	recs, err := kb.st.BreakerLoadAll(context.Background())
	if err != nil || len(recs) != 2 {
		t.Fatalf("the store holds %d breakers (%v), want 2", len(recs), err)
	}
}

func TestBreakerKeeperStoresEveryBreakerAtItsStopUnlessShared(t *testing.T) {
	t.Parallel()
	for _, shared := range []bool{false, true} {
		kb := newKeeperBundle(t, shared)
		kb.set(closed("mail", 1), closed("sms", 2))
		kb.k.noteFailure("mail") // its timer is stopped: the stop stores every breaker
		kb.k.Stop()
		<-kb.k.Stopped()
		kb.k.noteFailure("sms") // stopped: nothing more is armed
		kb.clk.Advance(time.Hour)
		recs, err := kb.st.BreakerLoadAll(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		want := 2
		if shared {
			want = 0 // a cache's snapshot would overwrite newer stored states
		}
		if len(recs) != want {
			t.Fatalf("shared %v: the stop stored %d breakers, want %d", shared, len(recs), want)
		}
	}
}
