package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// maxCachedStatements bounds the cache: statements whose text varies with their input (a list
// of ids, a filter) stop being cached once it is full.
const maxCachedStatements = 256

// stmtCache keeps the write connection's statements compiled. Compiling SQL costs more than
// running the small statements of the hot path, so each statement text is compiled once.
//
// The write pool has a single connection, and a transaction holds it, so a statement cannot be
// prepared while one runs. A statement first seen inside a transaction runs uncompiled and is
// prepared right after that transaction ends; the next transaction finds it ready.
type stmtCache struct {
	db      *sql.DB
	mu      sync.Mutex
	stmts   map[string]*sql.Stmt
	pending map[string]struct{}
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, stmts: make(map[string]*sql.Stmt), pending: make(map[string]struct{})}
}

// get returns the prepared statement for q, or nil after noting q for preparing.
func (c *stmtCache) get(q string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.stmts[q]; ok {
		return st
	}
	if len(c.stmts)+len(c.pending) < maxCachedStatements {
		c.pending[q] = struct{}{}
	}
	return nil
}

// preparePending compiles the statements noted since the last call. It must not run inside a
// write transaction.
func (c *stmtCache) preparePending(ctx context.Context) {
	c.mu.Lock()
	if len(c.pending) == 0 {
		c.mu.Unlock()
		return
	}
	pending := c.pending
	c.pending = make(map[string]struct{})
	c.mu.Unlock()
	for q := range pending {
		st, err := c.db.PrepareContext(ctx, q)
		if err != nil {
			continue // it still runs uncompiled; the error, if real, surfaces there
		}
		c.mu.Lock()
		if _, dup := c.stmts[q]; dup {
			_ = st.Close()
		} else {
			c.stmts[q] = st
		}
		c.mu.Unlock()
	}
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for q, st := range c.stmts {
		_ = st.Close()
		delete(c.stmts, q)
	}
}

// The tx methods below run every statement through the cache.

func (t *tx) execResult(q string, args ...any) (sql.Result, error) {
	if st := t.cache.get(q); st != nil {
		return t.tx.StmtContext(t.ctx, st).ExecContext(t.ctx, args...)
	}
	return t.tx.ExecContext(t.ctx, q, args...)
}

func (t *tx) query(q string, args ...any) (*sql.Rows, error) {
	if st := t.cache.get(q); st != nil {
		return t.tx.StmtContext(t.ctx, st).QueryContext(t.ctx, args...)
	}
	return t.tx.QueryContext(t.ctx, q, args...)
}

func (t *tx) queryRow(q string, args ...any) *sql.Row {
	if st := t.cache.get(q); st != nil {
		return t.tx.StmtContext(t.ctx, st).QueryRowContext(t.ctx, args...)
	}
	return t.tx.QueryRowContext(t.ctx, q, args...)
}
