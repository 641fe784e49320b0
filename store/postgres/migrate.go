package postgres

import (
	"context"
	"embed"
	"fmt"
	"log/slog"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobwire/jobwire/store/migration"
)

//go:embed migrations/*.up.sql
var migrationFiles embed.FS

// migrations are the store's schema migrations, in order.
func migrations() ([]migration.Migration, error) { return migration.Load(migrationFiles, "migrations") }

// Advisory lock keys of the store: the first half of a two-part key, the second being a hash of
// the schema the connection works in, so that databases (and schemas) do not share them.
const (
	lockMigrate = 0x6a770001 // held while migrations run
	lockLeader  = 0x6a770003 // held by the leader among the brokers serving the schema (Campaign)
	// lockConcurrency is every concurrency key's one lock (keyconc.go), held by a keyed lease to its
	// commit. It once had no schema half: the keyed leases of every schema of a database waited
	// for each other (TestKeysLockIsTheSchemas).
	lockConcurrency = 0x6a770004
)

// schemaKey is the second half of the store's advisory lock keys: the schema the session
// creates tables in.
const schemaKey = `hashtext(current_schema())`

func (s *Store) migrate(ctx context.Context) error {
	_, err := migrateTo(ctx, s.pool, s.url, s.log, math.MaxInt)
	return err
}

// Migrate applies the migrations the database at url lacks, under the same advisory lock as
// Open, and returns the names of those it applied. It is Open's first step alone: it does not
// join the brokers serving the database, so that a role allowed to change the schema can
// migrate it for brokers whose role may only use its tables.
func Migrate(ctx context.Context, url string, log *slog.Logger) ([]string, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", Redact(url), err)
	}
	defer pool.Close()
	return migrateTo(ctx, pool, Redact(url), log, math.MaxInt)
}

// migrateTo applies every migration newer than the schema's version, up to last, each in its
// own transaction together with its row in schema_migrations, on a connection of pool (to the
// database redacted names), and returns the names of those it applied. Brokers that start
// together take turns on an advisory lock, so each migration runs once.
func migrateTo(ctx context.Context, pool *pgxpool.Pool, redacted string, log *slog.Logger, last int) ([]string, error) {
	ms, err := migrations()
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", redacted, err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1, `+schemaKey+`)`, lockMigrate); err != nil {
		return nil, fmt.Errorf("lock for migrations: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1, `+schemaKey+`)`, lockMigrate)
	}()
	// Created only when missing: PostgreSQL checks the right to create in the schema even for
	// a table that exists, and a broker whose role may only use the tables opens a schema
	// that is up to date.
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, fmt.Errorf("look for schema_migrations: %w", err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version integer PRIMARY KEY, name text NOT NULL)`); err != nil {
			return nil, fmt.Errorf("create schema_migrations: %w", err)
		}
	}
	var current int
	if err := conn.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return nil, fmt.Errorf("read schema version: %w", err)
	}
	return migration.Apply(ctx, ms, current, last, log, func(ctx context.Context, m migration.Migration) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
			return err
		})
	})
}
