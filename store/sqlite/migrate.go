package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"log/slog"
	"math"

	"github.com/jobwire/jobwire/store/migration"
)

//go:embed migrations/*.up.sql
var migrationFiles embed.FS

// migrations are the store's schema migrations, in order.
func migrations() ([]migration.Migration, error) { return migration.Load(migrationFiles, "migrations") }

// migrate applies every migration newer than the database's version, each in its own
// transaction together with its row in schema_migrations (004 reads every finished job once,
// which on a large database holds up the start).
func migrate(ctx context.Context, db *sql.DB, log *slog.Logger) error {
	_, err := migrateTo(ctx, db, log, math.MaxInt)
	return err
}

// Migrate applies the migrations the database file at path lacks and returns the names of
// those it applied, holding the file's broker lock meanwhile (LockFile): it fails with
// *InUseError while a broker serves the file. Its errors name the file.
func Migrate(ctx context.Context, path string, log *slog.Logger) ([]string, error) {
	release, err := LockFile(path, "")
	if err != nil {
		return nil, err
	}
	defer release()
	db, err := sql.Open("sqlite", dataSource(path, SyncNormal, defaultBusyTimeout))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	applied, err := migrateTo(ctx, db, log, math.MaxInt)
	if err != nil {
		return applied, fmt.Errorf("%s: %w", path, err)
	}
	return applied, nil
}

// migrateTo applies the migrations up to version last and returns the names of those it
// applied; tests build older schemas with it.
func migrateTo(ctx context.Context, db *sql.DB, log *slog.Logger, last int) ([]string, error) {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL)`); err != nil {
		return nil, fmt.Errorf("create schema_migrations: %w", err)
	}
	var current int
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return nil, fmt.Errorf("read schema version: %w", err)
	}
	ms, err := migrations()
	if err != nil {
		return nil, err
	}
	return migration.Apply(ctx, ms, current, last, log, func(ctx context.Context, m migration.Migration) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			_ = tx.Rollback()
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name) VALUES (?, ?)`, m.Version, m.Name); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
}
