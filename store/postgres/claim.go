package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
)

// One database serves one broker for now. A second broker on the same database would not see
// the first one's leases, breakers or queue caps (they live in each broker's memory), so both
// would hand out work the other believes it owns. Claim makes the second broker refuse to start.
//
// The claim is a session advisory lock held by a connection of its own for the store's life.
// The server drops it when that session ends, however the broker ends, so a broker killed with
// SIGKILL leaves no stale claim behind; the broker_holder row only names the holder.

// InUseError is returned by Claim when another broker holds the database's claim.
type InUseError struct {
	DB string
	// Addr, PID and Host name the broker that holds the claim, as it wrote them; empty when it
	// had not written them yet.
	Addr, Host string
	PID        int
}

func (e *InUseError) Error() string {
	holder := "another broker"
	if e.PID != 0 {
		holder = fmt.Sprintf("another broker (pid %d on %s, listening on %s)", e.PID, e.Host, e.Addr)
	}
	return fmt.Sprintf("database %s is already in use by %s; several brokers on one PostgreSQL database are not supported yet", e.DB, holder)
}

// Claim takes the database's broker lock for this store and records addr (the broker's
// listening address), the pid and the host as its holder. It fails with *InUseError when
// another broker holds it. Close gives it up.
func (s *Store) Claim(ctx context.Context, addr string) error {
	s.claimMu.Lock()
	defer s.claimMu.Unlock()
	if s.claim != nil {
		return errors.New("the broker lock is claimed already")
	}
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("claim %s: %w", s.url, err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, `+schemaKey+`)`, lockBroker).Scan(&ok); err != nil {
		_ = conn.Close(ctx)
		return fmt.Errorf("claim %s: %w", s.url, err)
	}
	if !ok {
		_ = conn.Close(ctx)
		e := &InUseError{DB: s.url}
		_ = s.pool.QueryRow(ctx, `SELECT addr, pid, host FROM broker_holder`).Scan(&e.Addr, &e.PID, &e.Host)
		return e
	}
	host, _ := os.Hostname()
	if _, err := conn.Exec(ctx, `INSERT INTO broker_holder (addr, pid, host, started_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (one) DO UPDATE SET addr = excluded.addr, pid = excluded.pid, host = excluded.host,
		started_at = excluded.started_at`, addr, os.Getpid(), host, time.Now().UnixNano()); err != nil {
		_ = conn.Close(ctx)
		return fmt.Errorf("claim %s: %w", s.url, err)
	}
	s.claim = conn
	return nil
}

// Redact is a database URL without its password, for messages and logs.
func Redact(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "the database URL"
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// hasParam reports whether the URL's query sets name.
func hasParam(dbURL, name string) bool {
	u, err := url.Parse(dbURL)
	return err == nil && u.Query().Has(name)
}
