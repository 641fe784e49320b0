package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// openTemp opens a store on a fresh file in t's temporary directory, closed when t ends, and
// returns it with the tests' clock.
func openTemp(t *testing.T) (*Store, time.Time) {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "jobwire.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
}
