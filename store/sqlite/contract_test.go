package sqlite

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/storetest"
)

// The SQLite store keeps the contract every store keeps.
func TestStoreContract(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := Open(context.Background(), filepath.Join(t.TempDir(), "jobwire.db"), Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
