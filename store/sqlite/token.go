package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jobwire/jobwire/store"
)

// This file holds the API tokens: few rows, read on each authenticated call that misses the
// authenticator's cache, written by `jobwire tokens` and the bootstrap at start.

const tokenColumns = `id, name, hash, role, queues, types, created_at, revoked_at`

func scanToken(sc scanner) (*store.TokenRecord, error) {
	var (
		r             store.TokenRecord
		queues, types string
		created       int64
		revoked       sql.NullInt64
	)
	if err := sc.Scan(&r.ID, &r.Name, &r.Hash, &r.Role, &queues, &types, &created, &revoked); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(queues), &r.Queues); err != nil {
		return nil, fmt.Errorf("token %s: queues: %w", r.ID, err)
	}
	if err := json.Unmarshal([]byte(types), &r.Types); err != nil {
		return nil, fmt.Errorf("token %s: types: %w", r.ID, err)
	}
	r.CreatedAt, r.RevokedAt = fromNanos(created), fromNull(revoked)
	return &r, nil
}

// TokenGetByHash reads the token whose secret hashes to hash.
func (s *Store) TokenGetByHash(ctx context.Context, hash []byte) (*store.TokenRecord, error) {
	var out *store.TokenRecord
	err := s.read(ctx, "token_get", func(ctx context.Context) error {
		r, err := scanToken(s.r.QueryRowContext(ctx, `SELECT `+tokenColumns+` FROM api_tokens WHERE hash = ?`, hash))
		if errors.Is(err, sql.ErrNoRows) {
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
		rows, err := s.r.QueryContext(ctx, `SELECT `+tokenColumns+` FROM api_tokens ORDER BY created_at, rowid`)
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
	queues, err := jsonList(r.Queues)
	if err != nil {
		return err
	}
	types, err := jsonList(r.Types)
	if err != nil {
		return err
	}
	_, err = t.exec(`INSERT INTO api_tokens (`+tokenColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		r.ID, r.Name, r.Hash, r.Role, queues, types, nanos(r.CreatedAt), nullNanos(r.RevokedAt))
	return err
}

// TokenRevoke marks a token revoked, keeping the first revocation time.
func (t *tx) TokenRevoke(id string, now time.Time) (*store.TokenRecord, error) {
	if _, err := t.exec(`UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`, nanos(now), id); err != nil {
		return nil, err
	}
	r, err := scanToken(t.queryRow(`SELECT `+tokenColumns+` FROM api_tokens WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	return r, err
}

// TokenCount counts the tokens.
func (t *tx) TokenCount() (int, error) {
	var n int
	err := t.queryRow(`SELECT COUNT(*) FROM api_tokens`).Scan(&n)
	return n, err
}

// jsonList encodes a list of patterns, an empty list as [] rather than null.
func jsonList(v []string) (string, error) {
	if v == nil {
		v = []string{}
	}
	b, err := json.Marshal(v)
	return string(b), err
}
