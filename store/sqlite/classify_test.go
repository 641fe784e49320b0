package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobwire/jobwire/store/storeretry"
	sqlitedrv "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// The classification is checked against errors the driver really returns, provoked on real
// database files. Only codes that cannot be provoked reliably from a test are checked through
// TransientCode and CodeName directly (see TestClassifyCodesThatCannotBeProvoked): the driver's
// *Error has unexported fields, so it cannot be built by hand either.

// openDB opens dsn and closes it when the test ends. Every DSN sets busy_timeout(0) so a lock
// conflict fails at once instead of waiting in SQLite's busy handler.
func openDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatalf("open %s: %v", dsn, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func fileDSN(path string, params ...string) string {
	return "file:" + path + "?" + strings.Join(append([]string{"_pragma=busy_timeout(0)"}, params...), "&")
}

// conn pins one physical connection, so that a transaction begun with Exec stays on it.
func conn(t *testing.T, db *sql.DB) *sql.Conn {
	t.Helper()
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatalf("conn: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func mustExec(t *testing.T, e interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, query string, args ...any) {
	t.Helper()
	if _, err := e.ExecContext(context.Background(), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// newFile creates a database file holding table t(id INTEGER PRIMARY KEY, name TEXT NOT NULL
// UNIQUE) with one row, and returns its path.
func newFile(t *testing.T, params ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.db")
	db, err := sql.Open("sqlite", fileDSN(path, params...))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close() // closed before the test touches the file
	mustExec(t, db, `CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)`)
	mustExec(t, db, `INSERT INTO t (name) VALUES ('a')`)
	return path
}

func TestClassifyDriverErrors(t *testing.T) {
	t.Parallel()
	// A statement that waits instead of failing would hang the test; this bounds it. The bound
	// starts before the parallel subtests, which may wait long for a loaded machine's other
	// tests, so it is generous (one minute was not, beside two CPU hogs).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	tests := []struct {
		name          string
		provoke       func(t *testing.T) error
		wantCode      string
		wantTransient bool
	}{
		{
			name: "BUSY: another connection holds BEGIN IMMEDIATE",
			provoke: func(t *testing.T) error {
				path := newFile(t)
				holder := conn(t, openDB(t, fileDSN(path)))
				mustExec(t, holder, `BEGIN IMMEDIATE`)
				_, err := openDB(t, fileDSN(path)).ExecContext(ctx, `INSERT INTO t (name) VALUES ('b')`)
				return err
			},
			wantCode: "SQLITE_BUSY", wantTransient: true,
		},
		{
			name: "BUSY_SNAPSHOT: WAL reader's snapshot is stale when it tries to write",
			provoke: func(t *testing.T) error {
				path := newFile(t, "_pragma=journal_mode(WAL)")
				reader := conn(t, openDB(t, fileDSN(path, "_pragma=journal_mode(WAL)")))
				mustExec(t, reader, `BEGIN`)
				var n int
				if err := reader.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				mustExec(t, openDB(t, fileDSN(path, "_pragma=journal_mode(WAL)")), `INSERT INTO t (name) VALUES ('b')`)
				_, err := reader.ExecContext(ctx, `INSERT INTO t (name) VALUES ('c')`)
				return err
			},
			wantCode: "SQLITE_BUSY_SNAPSHOT", wantTransient: true,
		},
		{
			name: "LOCKED: dropping a table the same connection is reading",
			provoke: func(t *testing.T) error {
				c := conn(t, openDB(t, fileDSN(newFile(t))))
				mustExec(t, c, `INSERT INTO t (name) VALUES ('b')`)
				rows, err := c.QueryContext(ctx, `SELECT name FROM t`)
				if err != nil {
					t.Fatal(err)
				}
				defer rows.Close()
				if !rows.Next() {
					t.Fatal("no row")
				}
				_, err = c.ExecContext(ctx, `DROP TABLE t`)
				return err
			},
			wantCode: "SQLITE_LOCKED", wantTransient: true,
		},
		{
			name: "CONSTRAINT_UNIQUE",
			provoke: func(t *testing.T) error {
				_, err := openDB(t, fileDSN(newFile(t))).ExecContext(ctx, `INSERT INTO t (name) VALUES ('a')`)
				return err
			},
			wantCode: "SQLITE_CONSTRAINT_UNIQUE",
		},
		{
			name: "CONSTRAINT_NOTNULL",
			provoke: func(t *testing.T) error {
				_, err := openDB(t, fileDSN(newFile(t))).ExecContext(ctx, `INSERT INTO t (name) VALUES (NULL)`)
				return err
			},
			wantCode: "SQLITE_CONSTRAINT_NOTNULL",
		},
		{
			name: "CONSTRAINT_PRIMARYKEY",
			provoke: func(t *testing.T) error {
				db := openDB(t, fileDSN(filepath.Join(t.TempDir(), "pk.db")))
				mustExec(t, db, `CREATE TABLE k (id TEXT PRIMARY KEY)`)
				mustExec(t, db, `INSERT INTO k VALUES ('x')`)
				_, err := db.ExecContext(ctx, `INSERT INTO k VALUES ('x')`)
				return err
			},
			wantCode: "SQLITE_CONSTRAINT_PRIMARYKEY",
		},
		{
			name: "CONSTRAINT_FOREIGNKEY",
			provoke: func(t *testing.T) error {
				db := openDB(t, fileDSN(newFile(t), "_pragma=foreign_keys(1)"))
				mustExec(t, db, `CREATE TABLE child (t_id INTEGER NOT NULL REFERENCES t(id))`)
				_, err := db.ExecContext(ctx, `INSERT INTO child VALUES (99)`)
				return err
			},
			wantCode: "SQLITE_CONSTRAINT_FOREIGNKEY",
		},
		{
			name: "ERROR: no such table",
			provoke: func(t *testing.T) error {
				_, err := openDB(t, fileDSN(newFile(t))).ExecContext(ctx, `SELECT * FROM missing`)
				return err
			},
			wantCode: "SQLITE_ERROR",
		},
		{
			name: "ERROR: syntax error",
			provoke: func(t *testing.T) error {
				_, err := openDB(t, fileDSN(newFile(t))).ExecContext(ctx, `SELEKT 1`)
				return err
			},
			wantCode: "SQLITE_ERROR",
		},
		{
			name: "READONLY: write on a mode=ro connection",
			provoke: func(t *testing.T) error {
				_, err := openDB(t, fileDSN(newFile(t), "mode=ro")).ExecContext(ctx, `INSERT INTO t (name) VALUES ('b')`)
				return err
			},
			wantCode: "SQLITE_READONLY",
		},
		{
			name: "NOTADB: a file of garbage",
			provoke: func(t *testing.T) error {
				path := filepath.Join(t.TempDir(), "garbage.db")
				if err := os.WriteFile(path, []byte(strings.Repeat("this is not a database ", 400)), 0o600); err != nil {
					t.Fatal(err)
				}
				_, err := openDB(t, fileDSN(path)).ExecContext(ctx, `SELECT * FROM sqlite_master`)
				return err
			},
			wantCode: "SQLITE_NOTADB",
		},
		{
			name: "CORRUPT: a table page overwritten with garbage",
			provoke: func(t *testing.T) error {
				path := newFile(t)
				f, err := os.OpenFile(path, os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				// Page 1 is the schema; page 2 is table t's root. 0xFF is no valid page type.
				_, err = f.WriteAt([]byte(strings.Repeat("\xff", 4096)), 4096)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					t.Fatal(err)
				}
				var n int
				return openDB(t, fileDSN(path)).QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n)
			},
			wantCode: "SQLITE_CORRUPT",
		},
		{
			name: "FULL: max_page_count reached",
			provoke: func(t *testing.T) error {
				c := conn(t, openDB(t, fileDSN(newFile(t))))
				var pages int
				if err := c.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
					t.Fatal(err)
				}
				mustExec(t, c, fmt.Sprintf(`PRAGMA max_page_count = %d`, pages))
				_, err := c.ExecContext(ctx, `INSERT INTO t (name) VALUES (hex(randomblob(100000)))`)
				return err
			},
			wantCode: "SQLITE_FULL",
		},
		{
			name: "CANTOPEN: a path in a missing directory",
			provoke: func(t *testing.T) error {
				return openDB(t, fileDSN(filepath.Join(t.TempDir(), "missing", "test.db"))).PingContext(ctx)
			},
			wantCode: "SQLITE_CANTOPEN",
		},
		{
			name: "AUTH: an authorizer denies the statement",
			provoke: func(t *testing.T) error {
				c := conn(t, openDB(t, fileDSN(newFile(t))))
				err := c.Raw(func(dc any) error {
					return dc.(sqlitedrv.AuthorizerRegisterer).RegisterAuthorizer(
						func(action sqlitedrv.AuthorizerActionCode, _, _, _, _ string) sqlitedrv.AuthorizerReturnCode {
							if action == sqlitedrv.AuthDelete {
								return sqlitedrv.AuthorizerDeny
							}
							return sqlitedrv.AuthorizerOK
						})
				})
				if err != nil {
					t.Fatal(err)
				}
				_, err = c.ExecContext(ctx, `DELETE FROM t`)
				return err
			},
			wantCode: "SQLITE_AUTH",
		},
		{
			name: "cancelled context",
			provoke: func(t *testing.T) error {
				cctx, cancel := context.WithCancel(ctx)
				cancel()
				_, err := openDB(t, fileDSN(newFile(t))).ExecContext(cctx, `INSERT INTO t (name) VALUES ('b')`)
				if !errors.Is(err, context.Canceled) {
					t.Errorf("err = %v, want context.Canceled", err)
				}
				return err
			},
			wantCode: "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.provoke(t)
			if err == nil {
				t.Fatal("provoking the error: got nil")
			}
			code, transient := Classify(err)
			if code != tt.wantCode || transient != tt.wantTransient {
				rc, _ := ErrorCode(err)
				t.Fatalf("Classify(%v) [rc %d] = %q, %v; want %q, %v", err, rc, code, transient, tt.wantCode, tt.wantTransient)
			}
			if got := ErrorCodeName(err); got != tt.wantCode {
				t.Errorf("ErrorCodeName() = %q, want %q", got, tt.wantCode)
			}
			// The store wraps driver errors; classification must see through that.
			wrapped := fmt.Errorf("JobLease: %w", err)
			if code, transient := Classify(wrapped); code != tt.wantCode || transient != tt.wantTransient {
				t.Errorf("Classify(wrapped) = %q, %v; want %q, %v", code, transient, tt.wantCode, tt.wantTransient)
			}
		})
	}
}

// These codes cannot be provoked reliably from a test: BUSY_RECOVERY needs another process to
// crash mid-write in WAL mode, BUSY_TIMEOUT needs SQLite's blocking-lock build option,
// LOCKED_SHAREDCACHE is never returned because the driver waits on sqlite3_unlock_notify until
// the other shared-cache connection lets go, PERM needs a VFS that refuses access, and IOERR
// needs a failing disk. The classification of their codes
// is checked directly.
func TestClassifyCodesThatCannotBeProvoked(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rc            int
		wantName      string
		wantTransient bool
	}{
		{sqlite3.SQLITE_BUSY_RECOVERY, "SQLITE_BUSY_RECOVERY", true},
		{sqlite3.SQLITE_BUSY_TIMEOUT, "SQLITE_BUSY_TIMEOUT", true},
		{sqlite3.SQLITE_LOCKED_SHAREDCACHE, "SQLITE_LOCKED_SHAREDCACHE", true},
		{sqlite3.SQLITE_LOCKED_VTAB, "SQLITE_LOCKED_VTAB", true},
		{sqlite3.SQLITE_BUSY | 40<<8, "SQLITE_BUSY(10245)", true}, // an extended code newer than this table
		{sqlite3.SQLITE_PERM, "SQLITE_PERM", false},
		{sqlite3.SQLITE_CANTOPEN_ISDIR, "SQLITE_CANTOPEN_ISDIR", false},
		{sqlite3.SQLITE_READONLY_DBMOVED, "SQLITE_READONLY_DBMOVED", false},
		{sqlite3.SQLITE_CORRUPT_INDEX, "SQLITE_CORRUPT_INDEX", false},
		{sqlite3.SQLITE_IOERR_FSYNC, "SQLITE_IOERR_FSYNC", false},
		{sqlite3.SQLITE_INTERRUPT, "SQLITE_INTERRUPT", false},
		{sqlite3.SQLITE_SCHEMA, "SQLITE_SCHEMA", false},
		{sqlite3.SQLITE_NOMEM, "SQLITE_NOMEM", false},
		{4242, "SQLITE_UNKNOWN(4242)", false},
	}
	for _, tt := range tests {
		if got := CodeName(tt.rc); got != tt.wantName {
			t.Errorf("CodeName(%d) = %q, want %q", tt.rc, got, tt.wantName)
		}
		if got := TransientCode(tt.rc); got != tt.wantTransient {
			t.Errorf("TransientCode(%s) = %v, want %v", tt.wantName, got, tt.wantTransient)
		}
	}
}

func TestClassifyNonDriverErrors(t *testing.T) {
	t.Parallel()
	for _, err := range []error{nil, context.Canceled, context.DeadlineExceeded, sql.ErrNoRows, errors.New("SQLITE_BUSY")} {
		if code, transient := Classify(err); code != "" || transient {
			t.Errorf("Classify(%v) = %q, %v; want \"\", false", err, code, transient)
		}
	}
}

// The SQLite classifier drives the generic policy: a real SQLITE_BUSY is retried until the
// holder of the lock lets go, and a constraint violation is returned at once.
func TestClassifyWithPolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := newFile(t)
	holder := conn(t, openDB(t, fileDSN(path)))
	mustExec(t, holder, `BEGIN IMMEDIATE`)
	db := openDB(t, fileDSN(path))

	p, err := storeretry.New(storeretry.Config{
		Options:  storeretry.Options{MaxTransientRetries: 3, CommandTimeout: storeretry.DefaultCommandTimeout},
		Classify: Classify,
		// The first wait releases the lock, as another connection committing would.
		Sleep: func(ctx context.Context, _ time.Duration) error {
			_, err := holder.ExecContext(ctx, `ROLLBACK`)
			return err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var calls int
	err = p.Do(ctx, "insert", func(ctx context.Context) error {
		calls++
		_, err := db.ExecContext(ctx, `INSERT INTO t (name) VALUES ('b')`)
		return err
	})
	if err != nil || calls != 2 {
		t.Fatalf("Do() = %v after %d calls, want nil after 2", err, calls)
	}
	if got := p.Counters(); got["SQLITE_BUSY"] != 1 || len(got) != 1 {
		t.Errorf("Counters() = %v, want SQLITE_BUSY: 1", got)
	}

	calls = 0
	err = p.Do(ctx, "insert", func(ctx context.Context) error {
		calls++
		_, err := db.ExecContext(ctx, `INSERT INTO t (name) VALUES ('b')`)
		return err
	})
	if ErrorCodeName(err) != "SQLITE_CONSTRAINT_UNIQUE" || errors.Is(err, storeretry.ErrBusy) || calls != 1 {
		t.Fatalf("Do() = %v after %d calls, want the UNIQUE violation after 1", err, calls)
	}
}
