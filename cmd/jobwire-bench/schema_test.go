package main

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// TestScenarioSchemaDropped checks that a scenario on PostgreSQL leaves no schema behind in the
// database it was given, unless the run keeps its databases.
func TestScenarioSchemaDropped(t *testing.T) {
	base := pgtest.ServerURL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	exists := func(schema string) bool {
		t.Helper()
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	for _, keep := range []bool{false, true} {
		cfg := &benchConfig{Postgres: base, keep: keep}
		db, drop, err := scenarioDB(ctx, cfg, t.TempDir(), "e2e-100")
		if err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse(db)
		if err != nil {
			t.Fatal(err)
		}
		schema := u.Query().Get("search_path")
		if !exists(schema) {
			t.Fatalf("scenarioDB returned %s, and its schema %q does not exist", db, schema)
		}
		if err := drop(); err != nil {
			t.Fatal(err)
		}
		if got := exists(schema); got != keep {
			t.Errorf("keep %v: schema %s exists after the scenario = %v", keep, schema, got)
		}
		if keep {
			if _, err := conn.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`); err != nil {
				t.Fatal(err)
			}
		}
	}
}
