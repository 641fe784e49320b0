package postgres

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// A broker cut off from the database in the middle of a transaction (its packets dropped, its
// process frozen) does not keep the rows it locked for longer than IdleInTransaction: the
// server ends its session, and another broker's write that waited for one of those rows goes
// on. Without the bound, the other write waits until the server's TCP keepalives notice the
// dead session, minutes or hours later.
func TestSessionIdleInTransactionLetsItsLocksGo(t *testing.T) {
	t.Parallel()
	u := pgtest.URL(t)
	s := openBroker(t, u, nil, func(o *Options) { o.IdleInTransaction = 300 * time.Millisecond })

	const key = 4711
	locked := make(chan struct{})
	release := make(chan struct{})
	var first atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- s.Write(context.Background(), "frozen", func(stx store.Tx) error {
			if first.Swap(true) {
				return nil // the retry after the server ended the session
			}
			if _, err := stx.(*tx).exec(`SELECT pg_advisory_xact_lock($1)`, int64(key)); err != nil {
				return err
			}
			close(locked)
			<-release // frozen, as far as the server can tell: idle in its transaction
			return nil
		})
	}()
	<-locked
	var unfreeze sync.Once
	t.Cleanup(func() { // also when the test fails: the write is let go before the store closes
		unfreeze.Do(func() { close(release) })
		<-done
	})

	other, err := pgx.Connect(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	otx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := otx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(key)); err != nil {
		t.Fatalf("the lock of a session idle in its transaction was not let go: %v", err)
	}
	_ = otx.Rollback(ctx)
	// The write's outcome does not matter here: the session it ran on is gone.
}

// The store's sessions bound idle_in_transaction_session_timeout to IdleInTransaction (5 s by
// default, docs/operating.md), a negative one leaves the server's setting, and a URL that
// sets the parameter wins over both.
func TestSessionIdleInTransactionSetting(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		param string // added to the URL's query
		opt   time.Duration
		want  string
	}{
		{"default", "", 0, "5s"},
		{"option", "", 300 * time.Millisecond, "300ms"},
		{"server's own", "", -1, ""}, // "": what a session of the server's own gets
		{"the URL's", "idle_in_transaction_session_timeout=7000", 300 * time.Millisecond, "7s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := pgtest.URL(t)
			if tt.param != "" {
				u += "&" + tt.param
			}
			s := openBroker(t, u, nil, func(o *Options) { o.IdleInTransaction = tt.opt })
			ctx := context.Background()
			const show = `SHOW idle_in_transaction_session_timeout`
			var got string
			if err := s.pool.QueryRow(ctx, show).Scan(&got); err != nil {
				t.Fatal(err)
			}
			want := tt.want
			if want == "" {
				conn, err := pgx.Connect(ctx, u)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close(ctx)
				if err := conn.QueryRow(ctx, show).Scan(&want); err != nil {
					t.Fatal(err)
				}
			}
			if got != want {
				t.Errorf("idle_in_transaction_session_timeout = %s, want %s", got, want)
			}
		})
	}
}
