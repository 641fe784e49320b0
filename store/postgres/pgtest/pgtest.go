// Package pgtest gives tests a PostgreSQL database of their own: a fresh schema on the server
// that JOBWIRE_TEST_POSTGRES names (`make test` starts a private cluster and sets it).
//
// Without the variable a test that needs PostgreSQL is skipped with a message, except under CI
// (CI set to anything but "" or "false"), where it fails: CI must run every store's tests.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL is the variable that names the test server, e.g.
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable.
const EnvURL = "JOBWIRE_TEST_POSTGRES"

// Required reports whether tests must not skip for want of a server: under CI.
func Required() bool {
	ci := os.Getenv("CI")
	return ci != "" && ci != "false" && ci != "0"
}

// ServerURL returns the test server's URL, skipping t (failing it under CI) when none is set.
func ServerURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		if Required() {
			t.Fatalf("%s is not set, and CI requires the PostgreSQL tests: run them through `make test`, which starts a private cluster", EnvURL)
		}
		t.Skipf("%s is not set: skipping a PostgreSQL test (`make test` starts a private cluster for them)", EnvURL)
	}
	return u
}

// URL returns the URL of a new, empty schema on the test server, which the connections it
// opens use (search_path). The schema is dropped when t ends.
func URL(t testing.TB) string {
	t.Helper()
	base := ServerURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "jobwire_test_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to the test server %s: %v", EnvURL, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatalf("create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("connect to drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s: %v", EnvURL, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
