package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/store"
)

// This file holds the API tokens: few rows, read on each authenticated call that misses the
// authenticator's cache, written by `jobwire tokens` and the bootstrap at start.

const tokenColumns = `id, name, hash, role, queues, types, created_at, revoked_at`

func scanToken(row pgx.Row) (*store.TokenRecord, error) {
	var (
		r       store.TokenRecord
		created int64
		revoked *int64
	)
	if err := row.Scan(&r.ID, &r.Name, &r.Hash, &r.Role, &r.Queues, &r.Types, &created, &revoked); err != nil {
		return nil, err
	}
	if r.Queues == nil {
		r.Queues = []string{}
	}
	if r.Types == nil {
		r.Types = []string{}
	}
	r.CreatedAt, r.RevokedAt = fromNanos(created), fromNull(revoked)
	return &r, nil
}

// TokenGetByHash reads the token whose secret hashes to hash.
func (s *Store) TokenGetByHash(ctx context.Context, hash []byte) (*store.TokenRecord, error) {
	var out *store.TokenRecord
	err := s.read(ctx, "token_get", func(ctx context.Context) error {
		r, err := scanToken(s.pool.QueryRow(ctx, `SELECT `+tokenColumns+` FROM api_tokens WHERE hash = $1`, hash))
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrNotFound
		}
		out = r
		return err
	})
	return out, err
}

// TokenList reads every token, oldest first.
func (s *Store) TokenList(ctx context.Context) ([]store.TokenRecord, error) {
	var out []store.TokenRecord
	err := s.read(ctx, "token_list", func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, `SELECT `+tokenColumns+` FROM api_tokens ORDER BY created_at, seq`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r, err := scanToken(rows)
			if err != nil {
				return err
			}
			out = append(out, *r)
		}
		return rows.Err()
	})
	return out, err
}

// TokenInsert adds a token.
func (t *tx) TokenInsert(r *store.TokenRecord) error {
	queues, types := r.Queues, r.Types
	if queues == nil {
		queues = []string{}
	}
	if types == nil {
		types = []string{}
	}
	_, err := t.exec(`INSERT INTO api_tokens (`+tokenColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		r.ID, r.Name, r.Hash, r.Role, queues, types, nanos(r.CreatedAt), nullNanos(r.RevokedAt))
	return err
}

// TokenRevoke marks a token revoked, keeping the first revocation time.
func (t *tx) TokenRevoke(id string, now time.Time) (*store.TokenRecord, error) {
	if _, err := t.exec(`UPDATE api_tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL`, nanos(now), id); err != nil {
		return nil, err
	}
	r, err := scanToken(t.tx.QueryRow(t.ctx, `SELECT `+tokenColumns+` FROM api_tokens WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	return r, err
}

// TokenCount counts the tokens.
func (t *tx) TokenCount() (int, error) {
	var n int
	err := t.tx.QueryRow(t.ctx, `SELECT COUNT(*) FROM api_tokens`).Scan(&n)
	return n, err
}
