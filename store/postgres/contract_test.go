package postgres

import (
	"context"
	"log/slog"
	"testing"

	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
	"github.com/jobwire/jobwire/store/storetest"
)

// open opens a store on a fresh schema of the test server.
func open(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), pgtest.URL(t), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The PostgreSQL store keeps the contract every store keeps.
func TestStoreContract(t *testing.T) {
	t.Parallel()
	pgtest.ServerURL(t)
	storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
}
