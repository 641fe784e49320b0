package broker

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/sqlite"
	"github.com/jobwire/jobwire/store/sqlite/sqlitetest"
)

// newRaceBroker starts a broker on a fresh database. Its tests drive dispatch steps by hand
// with a session the dispatcher does not know, so the order of the steps is theirs.
func newRaceBroker(t *testing.T) *Broker { return newRaceBrokerOn(t, nil) }

// newRaceBrokerOn is newRaceBroker writing through wrap's store (nil: the database's).
func newRaceBrokerOn(t *testing.T, wrap func(store.Store) store.Store) *Broker {
	t.Helper()
	return newRaceBrokerWith(t, wrap, nil)
}

// newRaceBrokerWith is newRaceBrokerOn with the breakers bo configures (nil: the defaults).
func newRaceBrokerWith(t *testing.T, wrap func(store.Store) store.Store, bo *BreakerOptions) *Broker {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlitetest.Path(t), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var bst store.Store = st
	if wrap != nil {
		bst = wrap(st)
	}
	b, err := New(Options{Store: bst, Commit: testCommit, Config: DefaultConfig(), Clock: clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Breakers: bo})
	if err != nil {
		t.Fatal(err)
	}
	startForTest(t, b, st.Close)
	return b
}

func pendingMessages(s *Session) []Message {
	s.out.mu.Lock()
	defer s.out.mu.Unlock()
	return append([]Message(nil), s.out.msgs...)
}

// A cancel that commits after a dispatch round stored a lease, but before the round handed
// the job out, wins: no worker hears of the job and a probe slot taken for it goes back.
func TestCancelRacingDispatchWins(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		probe bool
	}{
		{"ordinary lease", false},
		{"breaker probe", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newRaceBroker(t)
			ctx := context.Background()
			res, err := b.Enqueue(ctx, []JobSpec{{Type: "t"}})
			if err != nil {
				t.Fatal(err)
			}
			id := res[0].ID
			s := &Session{b: b, id: "manual", workerID: "w1", types: []string{"t"}, capacity: 1,
				out: newOutbox(b.now), held: map[int64]*lease{}}

			g := &grant{sess: s, params: b.leaseParams(s, []string{"t"}, 1, b.now(), false)}
			if tt.probe {
				if _, err := b.ForceBreaker(context.Background(), "t", breaker.StateHalfOpen); err != nil {
					t.Fatal(err)
				}
				g.probe = true // handOut takes the probe's slot for the job leased
			}
			err = b.do(ctx, "lease", func(tx store.Tx) error {
				var err error
				g.leased, err = tx.JobLease(&g.params)
				return err
			})
			if err != nil || len(g.leased) != 1 {
				t.Fatalf("lease: %v, %d jobs", err, len(g.leased))
			}

			j, err := b.Cancel(ctx, id)
			if err != nil || j.State != job.StateCancelled {
				t.Fatalf("cancel: %v, %v", j, err)
			}
			b.handOut([]*grant{g})

			if msgs := pendingMessages(s); len(msgs) != 0 {
				t.Fatalf("the worker was sent %v", msgs)
			}
			b.mu.Lock()
			leases, raced, held := len(b.table.leases), len(b.table.racedCancels), len(s.held)
			b.mu.Unlock()
			if leases != 0 || held != 0 || raced != 0 {
				t.Fatalf("after hand-out: %d leases, %d held, %d raced cancels left", leases, held, raced)
			}
			if tt.probe {
				for _, info := range b.Breakers() {
					if info.Type == "t" && info.ProbesInFlight != 0 {
						t.Fatalf("breaker still counts %d probes in flight", info.ProbesInFlight)
					}
				}
			}
			if j, err := b.Get(ctx, id); err != nil || j.State != job.StateCancelled || j.Attempts != 0 {
				t.Fatalf("job = %v, %v", j, err)
			}
		})
	}
}
