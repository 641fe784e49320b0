// Package sqlitetest gives tests SQLite databases with every migration applied, copied from one
// database migrated once per test process.
//
// Migrating a new file is most of what opening a store costs a test under -race: each ALTER
// TABLE of the migrations makes SQLite parse the whole schema again, and the C library's
// translation to Go checks every pointer under the race detector. In the server package's tests
// that was half of all their CPU. The copy is the file those migrations write, byte for byte;
// the migrations themselves stay tested where they are the subject (store/sqlite).
package sqlitetest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/jobwire/jobwire/store/sqlite"
)

var template struct {
	once sync.Once
	data []byte
	err  error
}

// Prepare puts a migrated, empty database at path, unless a file is there already (a test
// that reopens its database after a restart finds it as it left it).
func Prepare(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	template.once.Do(func() { template.data, template.err = migrated() })
	if template.err != nil {
		return fmt.Errorf("sqlitetest: migrate the template database: %w", template.err)
	}
	return os.WriteFile(path, template.data, 0o600)
}

// migrated returns the bytes of a database file that the store created and migrated, then
// closed: closing its last connection checkpoints the write-ahead log into the file.
func migrated() ([]byte, error) {
	dir, err := os.MkdirTemp("", "jobwire-sqlitetest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "template.db")
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	if err := st.Close(); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
		return nil, fmt.Errorf("%s-wal holds %d bytes after the store closed", path, fi.Size())
	}
	return os.ReadFile(path)
}

// Path returns the path of a migrated, empty database in a directory of the test's own.
func Path(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "jobwire.db")
	if err := Prepare(path); err != nil {
		t.Fatal(err)
	}
	return path
}
