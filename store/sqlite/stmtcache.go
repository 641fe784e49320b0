package sqlite

import (
	"context"
	"database/sql"
)

// maxCachedStatements bounds the cache: statements whose text varies with their input (a list
// of ids, a filter) stop being cached once it is full.
const maxCachedStatements = 256

// stmtCache keeps the write connection's statements compiled. Compiling SQL costs more than
// running the small statements of the hot path, so each statement text is compiled once, the
// first time it runs. Only the writer goroutine of the store uses it (Store.Write runs one
// transaction at a time), so it needs no lock.
type stmtCache struct {
	conn  *sql.Conn
	stmts map[string]*sql.Stmt
}

func newStmtCache(conn *sql.Conn) *stmtCache {
	return &stmtCache{conn: conn, stmts: make(map[string]*sql.Stmt)}
}

// get returns the compiled statement for q, compiling it now if there is room; nil when the
// cache is full or q does not compile (running it uncompiled then reports the error).
func (c *stmtCache) get(ctx context.Context, q string) *sql.Stmt {
	if st, ok := c.stmts[q]; ok {
		return st
	}
	if len(c.stmts) >= maxCachedStatements {
		return nil
	}
	st, err := c.conn.PrepareContext(ctx, q)
	if err != nil {
		return nil
	}
	c.stmts[q] = st
	return st
}

func (c *stmtCache) close() {
	for q, st := range c.stmts {
		_ = st.Close()
		delete(c.stmts, q)
	}
}

// The tx methods below run every statement through the cache.

func (t *tx) execResult(q string, args ...any) (sql.Result, error) {
	if st := t.cache.get(t.ctx, q); st != nil {
		return st.ExecContext(t.ctx, args...)
	}
	return t.cache.conn.ExecContext(t.ctx, q, args...)
}

func (t *tx) query(q string, args ...any) (*sql.Rows, error) {
	if st := t.cache.get(t.ctx, q); st != nil {
		return st.QueryContext(t.ctx, args...)
	}
	return t.cache.conn.QueryContext(t.ctx, q, args...)
}

func (t *tx) queryRow(q string, args ...any) *sql.Row {
	if st := t.cache.get(t.ctx, q); st != nil {
		return st.QueryRowContext(t.ctx, args...)
	}
	return t.cache.conn.QueryRowContext(t.ctx, q, args...)
}
