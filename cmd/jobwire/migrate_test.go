package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/store/postgres/pgtest"
	"github.com/jobwire/jobwire/store/sqlite"
)

// migrate applies every migration once and says so; run again, it has nothing to apply.
func TestMigrate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		db   func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return filepath.Join(t.TempDir(), "jobwire.db") }},
		{"postgres", func(t *testing.T) string { return pgtest.URL(t) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := tt.db(t)
			first := runCLI(t, nil, "migrate", "--db", db)
			if first.code != 0 {
				t.Fatalf("migrate: exit %d\n%s", first.code, first.stderr)
			}
			lines := strings.Split(strings.TrimSpace(first.stdout), "\n")
			applied := lines[:len(lines)-1]
			for _, l := range applied {
				if !strings.HasPrefix(l, "applied 0") || !strings.HasSuffix(l, ".up.sql") {
					t.Fatalf("migrate printed %q, want one line per migration applied:\n%s", l, first.stdout)
				}
			}
			if want := "is up to date; " + strconv.Itoa(len(applied)) + " migrations applied"; len(applied) < 5 ||
				!strings.HasSuffix(lines[len(lines)-1], want) {
				t.Fatalf("migrate printed:\n%s\nwant every migration, then a line ending %q", first.stdout, want)
			}
			again := runCLI(t, nil, "migrate", "--db", db)
			if again.code != 0 || !strings.HasSuffix(strings.TrimSpace(again.stdout), "is up to date; nothing to apply") {
				t.Fatalf("migrate again: exit %d\n%s%s", again.code, again.stdout, again.stderr)
			}
		})
	}
}

// On PostgreSQL, migrate does not join the brokers serving the database.
func TestMigrateJoinsNoBrokers(t *testing.T) {
	t.Parallel()
	db := pgtest.URL(t)
	if r := runCLI(t, map[string]string{"JOBWIRE_DB": db}, "migrate"); r.code != 0 {
		t.Fatalf("migrate: exit %d\n%s", r.code, r.stderr)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var brokers int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM brokers`).Scan(&brokers); err != nil || brokers != 0 {
		t.Fatalf("brokers after migrate: %d, %v; want none", brokers, err)
	}
}

// Bad input exits 2 with a sentence; a SQLite file a broker serves is not migrated under it.
func TestMigrateRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	served := filepath.Join(dir, "served.db")
	release, err := sqlite.LockFile(served, "127.0.0.1:7070")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	tests := []struct {
		name    string
		args    []string
		environ map[string]string
		code    int
		want    string
	}{
		{"an argument", []string{"migrate", "now"}, nil, 2, `migrate takes no arguments, got "now"`},
		{"directory missing", []string{"migrate", "--db", filepath.Join(dir, "missing", "j.db")}, nil, 2,
			`--db "` + filepath.Join(dir, "missing", "j.db") + `": directory "` + filepath.Join(dir, "missing") + `" does not exist`},
		{"from the environment", []string{"migrate"}, map[string]string{"JOBWIRE_DB": dir}, 2, "JOBWIRE_DB " + strconv.Quote(dir) + " is a directory"},
		{"a broker serves it", []string{"migrate", "--db", served}, nil, 1,
			"is already in use by another broker (pid " + strconv.Itoa(os.Getpid()) + ", listening on 127.0.0.1:7070)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, tt.environ, tt.args...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", r.code, r.stderr, tt.code, tt.want)
			}
		})
	}
}
