package sqlite_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/sqlite"
	"github.com/jobwire/jobwire/store/sqlite/sqlitetest"
	"github.com/jobwire/jobwire/store/storetest"
)

// The SQLite store keeps the contract every store keeps. Each case opens a file migrated once
// for the process (sqlitetest): the migrations are tested in migrate_test.go.
func TestStoreContract(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := sqlite.Open(context.Background(), sqlitetest.Path(t), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
