package postgres

import (
	"context"

	"log/slog"

	"sync"
	"testing"

	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// Brokers that start together on a new database migrate it once between them: the migrations
// run under an advisory lock.
func TestConcurrentOpensMigrateOnce(t *testing.T) {
	t.Parallel()
	u := pgtest.URL(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	stores := make([]*Store, 3)
	errs := make([]error, 3)
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = Open(ctx, u, Options{Logger: slog.New(slog.DiscardHandler)}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	var n, distinct int
	if err := stores[0].pool.QueryRow(ctx, `SELECT COUNT(*), COUNT(DISTINCT version) FROM schema_migrations`).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != len(ms) || distinct != len(ms) {
		t.Fatalf("schema_migrations holds %d rows (%d versions), want each of %d migrations once", n, distinct, len(ms))
	}
}

// A second broker on a database another broker serves refuses to start, naming the first; once

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://jw:secret@db:5432/jobs?sslmode=require": "postgres://jw:xxxxx@db:5432/jobs?sslmode=require",
		"postgres://db/jobs?password=secret":                "postgres://db/jobs?password=xxxxx",
		"postgres://jw@db/jobs":                             "postgres://jw@db/jobs",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}
