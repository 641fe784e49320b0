package sqlitetest

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/jobwire/jobwire/store/sqlite"
)

// schema lists the database's tables, indexes and triggers with their SQL, and the migrations
// it records.
func schema(t *testing.T, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT type || ' ' || name || ': ' || COALESCE(sql, '') FROM sqlite_schema
		UNION ALL SELECT 'migration ' || version || ' ' || name FROM schema_migrations ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// A prepared database is what the store's own migrations make of a new file, and the store
// opens it with nothing left to migrate.
func TestPreparedIsMigrated(t *testing.T) {
	migrated := filepath.Join(t.TempDir(), "migrated.db")
	st, err := sqlite.Open(context.Background(), migrated, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	prepared := Path(t)
	want, got := schema(t, migrated), schema(t, prepared)
	if len(want) < 20 || !reflect.DeepEqual(got, want) {
		t.Fatalf("prepared database's schema:\n%q\nwant:\n%q", got, want)
	}
}

// An existing file is left as it is: a test reopens its database after a restart.
func TestPrepareKeepsAnExistingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobwire.db")
	if err := os.WriteFile(path, []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Prepare(path); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "kept" {
		t.Fatalf("Prepare replaced an existing file: %q", b)
	}
}
