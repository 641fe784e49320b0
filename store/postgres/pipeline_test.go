package postgres

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobwire/jobwire/store"
)

// pipeBundle is a store whose pool counts the round trips its statements take.
type pipeBundle struct {
	s      *Store
	trips  *tripCounter
	insert func(tx store.Tx, typ string) error
}

func setupPipe(t *testing.T) *pipeBundle {
	t.Helper()
	s, trips := openTraced(t)
	now := time.Unix(1_700_000_000, 0)
	return &pipeBundle{s: s, trips: trips, insert: func(tx store.Tx, typ string) error {
		_, err := tx.JobInsertMany([]*store.JobInsertParams{{Type: typ, Queue: "default", Payload: []byte(`{}`),
			MaxAttempts: 3, RunAt: now, Now: now, AttemptTimeout: time.Minute}})
		return err
	}}
}

func (b *pipeBundle) types(t *testing.T) map[string]int64 {
	t.Helper()
	counts, err := b.s.JobCounts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, c := range counts {
		out[c.Type] += c.Count
	}
	return out
}

// tripCounter counts what the connections send: one statement or one batch is one round trip
// (a statement's preparation on first use aside).
type tripCounter struct {
	n atomic.Int64

	mu   sync.Mutex
	sent []string // every statement, batched or not, in the order sent
}

func (c *tripCounter) record(sql string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent = append(c.sent, sql)
}

// statements returns what was sent so far.
func (c *tripCounter) statements() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sent)
}

func (c *tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	c.record(d.SQL)
	return ctx
}
func (c *tripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *tripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *tripCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.record(d.SQL)
}
func (c *tripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// The statements nobody waits for ride with the next one: a write that inserts jobs of a new
// queue and commits costs two round trips (BEGIN with the ids drawn; the insert, the queue's
// row, the receipt and COMMIT), not six.
func TestHeldStatementsShareRoundTrips(t *testing.T) {
	t.Parallel()
	b := setupPipe(t)
	before := b.trips.n.Load()
	if err := b.s.Write(context.Background(), "insert", func(tx store.Tx) error { return b.insert(tx, "a") }); err != nil {
		t.Fatal(err)
	}
	if n := b.trips.n.Load() - before; n != 2 {
		t.Fatalf("an insert into a new queue took %d round trips, want 2", n)
	}
	if got := b.types(t); got["a"] != 1 {
		t.Fatalf("jobs stored: %v, want one of type a", got)
	}
}

// A held statement that fails fails the write with the server's own error, and nothing of the
// write is stored.
func TestHeldStatementFailureFailsTheWrite(t *testing.T) {
	t.Parallel()
	b := setupPipe(t)
	err := b.s.Write(context.Background(), "test", func(stx store.Tx) error {
		if err := b.insert(stx, "a"); err != nil {
			return err
		}
		return stx.(*tx).hold(`SELECT 1 / 0`)
	})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22012" {
		t.Fatalf("write with a failing held statement: %v, want the server's division by zero", err)
	}
	if got := b.types(t); len(got) != 0 {
		t.Fatalf("jobs stored by a failed write: %v", got)
	}
}

// A held statement that fails inside Isolated fails that part alone, as a statement run at
// once would: the savepoint is flushed before it is released.
func TestHeldStatementFailsItsIsolatedPart(t *testing.T) {
	t.Parallel()
	b := setupPipe(t)
	err := b.s.Write(context.Background(), "test", func(stx store.Tx) error {
		if err := b.insert(stx, "kept"); err != nil {
			return err
		}
		err := stx.Isolated(func() error {
			if err := b.insert(stx, "undone"); err != nil {
				return err
			}
			return stx.(*tx).hold(`SELECT 1 / 0`)
		})
		var iso *store.IsolatedError
		if !errors.As(err, &iso) {
			return errors.New("Isolated did not fail alone")
		}
		return b.insert(stx, "after")
	})
	if err != nil {
		t.Fatalf("write around a failed isolated part: %v", err)
	}
	if got := b.types(t); got["kept"] != 1 || got["after"] != 1 || got["undone"] != 0 {
		t.Fatalf("jobs stored: %v, want one kept and one after, none undone", got)
	}
}
