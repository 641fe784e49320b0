package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/storeretry"
)

// CodeConnectionLost is the code under which failures of the connection itself (reset, closed,
// unreachable server) are counted: they carry no SQLSTATE.
const CodeConnectionLost = "CONNECTION_LOST"

// Classify is the storeretry.Classifier of the PostgreSQL store. The code is the SQLSTATE of a
// server error, or CodeConnectionLost. Transient, and so retried like SQLITE_BUSY without
// spending a job attempt, are the faults that go away by themselves once another transaction
// or the server moves on:
//
//   - 40001 serialization failure, 40P01 deadlock detected: the database chose this
//     transaction to give way; run again, it succeeds.
//   - 55P03 lock not available (lock_timeout): another transaction held a lock too long.
//   - 57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now: the server or an
//     operator ended the session (a restart, a failover, pg_terminate_backend).
//   - class 08, connection exceptions, and a connection lost without a SQLSTATE.
//   - 53300 too many connections: others will close theirs.
//
// Everything else is not: constraint, data, syntax, permission and disk-full errors, and a
// cancelled or expired context (the retry policy recognises its own command timeout).
func Classify(err error) (code string, transient bool) {
	if err == nil {
		return "", false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code, TransientCode(pgErr.Code)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return "", false
	}
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	if errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.As(err, &netErr) || errors.As(err, &connectErr) || pgconn.SafeToRetry(err) {
		return CodeConnectionLost, true
	}
	return "", false
}

var _ storeretry.Classifier = Classify

// UnavailableCode reports whether a server error with SQLSTATE code means the database cannot be
// used right now for a reason outside the broker that an operator can fix, after which the same
// call succeeds: a full disk (53100), memory (53200), an I/O error (class 58), a database that
// only reads (25006: a standby, or default_transaction_read_only), permissions (42501) or a
// refused login (class 28). Retrying at once cannot help, so these are not transient; callers are
// told to come back later (store.ErrUnavailable).
func UnavailableCode(code string) bool {
	switch code {
	case "53100", "53200", "25006", "42501":
		return true
	}
	return strings.HasPrefix(code, "58") || strings.HasPrefix(code, "28")
}

// unavailable marks an error whose SQLSTATE is an UnavailableCode with store.ErrUnavailable,
// keeping the driver's error for errors.As and the code for the message.
func unavailable(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && UnavailableCode(pgErr.Code) {
		return fmt.Errorf("%w (SQLSTATE %s): %w", store.ErrUnavailable, pgErr.Code, err)
	}
	return err
}

// TransientCode reports whether a server error with SQLSTATE code may go away if the
// transaction is run again (see Classify).
func TransientCode(code string) bool {
	switch code {
	case "40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300":
		return true
	}
	return strings.HasPrefix(code, "08")
}
