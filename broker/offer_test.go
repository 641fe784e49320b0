package broker

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// namedWrites is a store that lists the names of its writes.
type namedWrites struct {
	store.Store
	mu    sync.Mutex
	names []string
}

func (w *namedWrites) Write(ctx context.Context, op string, fn func(store.Tx) error) error {
	w.mu.Lock()
	w.names = append(w.names, op)
	w.mu.Unlock()
	return w.Store.Write(ctx, op, fn)
}

// since returns the names of the writes after the first n.
func (w *namedWrites) since(n int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.names[n:])
}

func (w *namedWrites) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.names)
}

// offerBroker starts one broker of a cluster on a fresh PostgreSQL schema, its writes named.
func offerBroker(t *testing.T) (*Broker, *namedWrites) {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := postgres.Open(ctx, pgtest.URL(t), postgres.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	w := &namedWrites{Store: st}
	b, err := New(Options{Store: w, Cluster: st, Config: DefaultConfig(), Logger: log,
		Clock: clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	startForTest(t, b, st.Close)
	return b, w
}

// openPay opens a worker stream for payType with capacity slots.
func openPay(t *testing.T, b *Broker, capacity int) *Session {
	t.Helper()
	s, _, err := b.Open(context.Background(), Hello{WorkerID: "w", Types: []string{payType}, Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// settle waits until b has committed everything asked of it so far, hand-outs included.
func settle(t *testing.T, b *Broker) {
	t.Helper()
	for range 2 {
		if err := b.do(context.Background(), "barrier", func(store.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
}

// In a cluster, a job enqueued while a worker has room is leased by the write that stores it
// and handed out: no dispatch round, and no second write, leases it.
func TestOfferedJobLeasedByItsInsert(t *testing.T) {
	t.Parallel()
	b, w := offerBroker(t)
	s := openPay(t, b, 4)
	settle(t, b)
	before := w.count()
	ids, err := b.Enqueue(context.Background(), []JobSpec{{Type: payType}})
	if err != nil {
		t.Fatal(err)
	}
	a := assignments(t, s, 1)[0]
	if a.Job.ID != ids[0].ID || a.Attempt != 1 || a.Token.Seq != 1 {
		t.Fatalf("assignment %+v (token %v), want job %d, attempt 1, first lease", a.Job, a.Token, ids[0].ID)
	}
	// A round would write "lease", or "batch" with the enqueue; the leader's upkeep may write.
	writes := w.since(before)
	if slices.Contains(writes, "lease") || slices.Contains(writes, "batch") || !slices.Contains(writes, "enqueue") {
		t.Fatalf("writes after the enqueue: %q, want the enqueue alone, with no lease", writes)
	}
	b.mu.Lock()
	offered := s.offered
	b.mu.Unlock()
	if offered != 0 {
		t.Fatalf("%d slots still promised after the offer was settled", offered)
	}
}

// Offers count against a worker's capacity until they are settled: enqueues at once of more
// jobs than it has slots never give it more jobs than its capacity.
func TestOffersKeepToCapacity(t *testing.T) {
	t.Parallel()
	b, _ := offerBroker(t)
	s := openPay(t, b, 1)
	settle(t, b)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if _, err := b.Enqueue(context.Background(), []JobSpec{{Type: payType}}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	settle(t, b)
	if n := assigned(s); n != 1 {
		t.Fatalf("a worker of one slot was handed %d jobs", n)
	}
}

// A job offered but left PENDING by the store (a job of its priority was waiting) is leased
// by the round its write then asks for, without anything else happening.
func TestOfferLeftPendingGetsARound(t *testing.T) {
	t.Parallel()
	b, _ := offerBroker(t)
	if _, err := b.Enqueue(context.Background(), []JobSpec{{Type: "nobody"}}); err != nil {
		t.Fatal(err)
	}
	s := openPay(t, b, 4)
	settle(t, b)
	ids, err := b.Enqueue(context.Background(), []JobSpec{{Type: payType}})
	if err != nil {
		t.Fatal(err)
	}
	if a := assignments(t, s, 1)[0]; a.Job.ID != ids[0].ID {
		t.Fatalf("assigned job %d, want %d", a.Job.ID, ids[0].ID)
	}
}
