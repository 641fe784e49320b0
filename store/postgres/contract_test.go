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

// A broker whose role may only use the schema (USAGE, and all rights on its tables and
// sequences, no CREATE), on a schema another role migrated, keeps the whole contract too:
// docs/deploying.md ("Role") gives brokers no more than that.
func TestStoreContractAsATableUser(t *testing.T) {
	t.Parallel()
	pgtest.ServerURL(t)
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := Open(context.Background(), roleURL(t, pgtest.URL(t), "user"), Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
