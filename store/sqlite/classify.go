package sqlite

import (
	"errors"
	"fmt"

	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/storeretry"
	sqlitedrv "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Classify is the storeretry.Classifier of the SQLite store. It reads the driver's result code,
// never the message text, and reports as transient only the codes that another connection
// causes and that go away once it commits or rolls back: SQLITE_BUSY and SQLITE_LOCKED with all
// their extended codes. Constraint, schema, read-only, corruption, full-disk and permission
// errors, and errors that are not SQLite errors at all (a cancelled context, for one), are not
// transient. The code is "" for an error that carries no SQLite result code.
//
// A command timeout is not seen here: the policy recognises it from its own context.
func Classify(err error) (code string, transient bool) {
	rc, ok := ErrorCode(err)
	if !ok {
		return "", false
	}
	return CodeName(rc), TransientCode(rc)
}

var _ storeretry.Classifier = Classify

// CodedError is an error that carries a SQLite result code. The driver's *sqlite.Error is one;
// the interface lets fault-injection tests and wrappers produce an error the classifier treats
// exactly like the driver's, since the driver's type cannot be built outside its package.
type CodedError interface {
	error
	Code() int
}

var _ CodedError = (*sqlitedrv.Error)(nil)

// ErrorCode returns the SQLite result code, extended where SQLite gives one, carried by err or
// any error it wraps; ok is false when err carries no SQLite result code.
func ErrorCode(err error) (code int, ok bool) {
	var e CodedError
	if !errors.As(err, &e) {
		return 0, false
	}
	return e.Code(), true
}

// ErrorCodeName returns the name of err's SQLite result code, e.g. "SQLITE_CONSTRAINT_UNIQUE",
// or "" when err is not a driver error.
func ErrorCodeName(err error) string {
	rc, ok := ErrorCode(err)
	if !ok {
		return ""
	}
	return CodeName(rc)
}

// TransientCode reports whether an operation that failed with result code rc may succeed if run
// again: the primary code is SQLITE_BUSY (another connection holds the lock, or a read snapshot
// went stale in WAL mode) or SQLITE_LOCKED (a conflict inside a shared cache or connection).
func TransientCode(rc int) bool {
	switch rc & 0xff { // the low byte of an extended code is its primary code
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	default:
		return false
	}
}

// UnavailableCode reports whether result code rc means the database file cannot be used right
// now for a reason outside SQLite that an operator can fix, after which the same call succeeds:
// a disk I/O error (SQLITE_IOERR), a read-only file or file system (SQLITE_READONLY), a full disk
// (SQLITE_FULL), a file that cannot be opened (SQLITE_CANTOPEN), permissions (SQLITE_PERM) or
// memory (SQLITE_NOMEM). Retrying at once cannot help, so these are not transient; callers are
// told to come back later (store.ErrUnavailable). Corruption is not among them: it needs a
// restore, not a wait.
func UnavailableCode(rc int) bool {
	switch rc & 0xff {
	case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN,
		sqlite3.SQLITE_PERM, sqlite3.SQLITE_NOMEM:
		return true
	default:
		return false
	}
}

// unavailable marks an error whose SQLite result code is an UnavailableCode with
// store.ErrUnavailable, keeping the driver's error for errors.As and the code for the message.
func unavailable(err error) error {
	if rc, ok := ErrorCode(err); ok && UnavailableCode(rc) {
		return fmt.Errorf("%w (%s): %w", store.ErrUnavailable, CodeName(rc), err)
	}
	return err
}

// CodeName returns the SQLite name of a primary or extended result code, e.g. "SQLITE_BUSY" or
// "SQLITE_BUSY_SNAPSHOT". An extended code this build does not know is named after its primary
// code with the number appended, so that it still groups with its family in logs.
func CodeName(rc int) string {
	if name, ok := codeNames[rc]; ok {
		return name
	}
	if name, ok := codeNames[rc&0xff]; ok {
		return fmt.Sprintf("%s(%d)", name, rc)
	}
	return fmt.Sprintf("SQLITE_UNKNOWN(%d)", rc)
}

// codeNames names every result code of the SQLite version the driver embeds, apart from the
// success codes, which never reach an error.
var codeNames = map[int]string{
	sqlite3.SQLITE_ERROR:                   "SQLITE_ERROR",
	sqlite3.SQLITE_INTERNAL:                "SQLITE_INTERNAL",
	sqlite3.SQLITE_PERM:                    "SQLITE_PERM",
	sqlite3.SQLITE_ABORT:                   "SQLITE_ABORT",
	sqlite3.SQLITE_BUSY:                    "SQLITE_BUSY",
	sqlite3.SQLITE_LOCKED:                  "SQLITE_LOCKED",
	sqlite3.SQLITE_NOMEM:                   "SQLITE_NOMEM",
	sqlite3.SQLITE_READONLY:                "SQLITE_READONLY",
	sqlite3.SQLITE_INTERRUPT:               "SQLITE_INTERRUPT",
	sqlite3.SQLITE_IOERR:                   "SQLITE_IOERR",
	sqlite3.SQLITE_CORRUPT:                 "SQLITE_CORRUPT",
	sqlite3.SQLITE_NOTFOUND:                "SQLITE_NOTFOUND",
	sqlite3.SQLITE_FULL:                    "SQLITE_FULL",
	sqlite3.SQLITE_CANTOPEN:                "SQLITE_CANTOPEN",
	sqlite3.SQLITE_PROTOCOL:                "SQLITE_PROTOCOL",
	sqlite3.SQLITE_EMPTY:                   "SQLITE_EMPTY",
	sqlite3.SQLITE_SCHEMA:                  "SQLITE_SCHEMA",
	sqlite3.SQLITE_TOOBIG:                  "SQLITE_TOOBIG",
	sqlite3.SQLITE_CONSTRAINT:              "SQLITE_CONSTRAINT",
	sqlite3.SQLITE_MISMATCH:                "SQLITE_MISMATCH",
	sqlite3.SQLITE_MISUSE:                  "SQLITE_MISUSE",
	sqlite3.SQLITE_NOLFS:                   "SQLITE_NOLFS",
	sqlite3.SQLITE_AUTH:                    "SQLITE_AUTH",
	sqlite3.SQLITE_FORMAT:                  "SQLITE_FORMAT",
	sqlite3.SQLITE_RANGE:                   "SQLITE_RANGE",
	sqlite3.SQLITE_NOTADB:                  "SQLITE_NOTADB",
	sqlite3.SQLITE_NOTICE:                  "SQLITE_NOTICE",
	sqlite3.SQLITE_WARNING:                 "SQLITE_WARNING",
	sqlite3.SQLITE_ERROR_MISSING_COLLSEQ:   "SQLITE_ERROR_MISSING_COLLSEQ",
	sqlite3.SQLITE_BUSY_RECOVERY:           "SQLITE_BUSY_RECOVERY",
	sqlite3.SQLITE_LOCKED_SHAREDCACHE:      "SQLITE_LOCKED_SHAREDCACHE",
	sqlite3.SQLITE_READONLY_RECOVERY:       "SQLITE_READONLY_RECOVERY",
	sqlite3.SQLITE_IOERR_READ:              "SQLITE_IOERR_READ",
	sqlite3.SQLITE_CORRUPT_VTAB:            "SQLITE_CORRUPT_VTAB",
	sqlite3.SQLITE_CANTOPEN_NOTEMPDIR:      "SQLITE_CANTOPEN_NOTEMPDIR",
	sqlite3.SQLITE_CONSTRAINT_CHECK:        "SQLITE_CONSTRAINT_CHECK",
	sqlite3.SQLITE_AUTH_USER:               "SQLITE_AUTH_USER",
	sqlite3.SQLITE_NOTICE_RECOVER_WAL:      "SQLITE_NOTICE_RECOVER_WAL",
	sqlite3.SQLITE_WARNING_AUTOINDEX:       "SQLITE_WARNING_AUTOINDEX",
	sqlite3.SQLITE_ERROR_RETRY:             "SQLITE_ERROR_RETRY",
	sqlite3.SQLITE_ABORT_ROLLBACK:          "SQLITE_ABORT_ROLLBACK",
	sqlite3.SQLITE_BUSY_SNAPSHOT:           "SQLITE_BUSY_SNAPSHOT",
	sqlite3.SQLITE_LOCKED_VTAB:             "SQLITE_LOCKED_VTAB",
	sqlite3.SQLITE_READONLY_CANTLOCK:       "SQLITE_READONLY_CANTLOCK",
	sqlite3.SQLITE_IOERR_SHORT_READ:        "SQLITE_IOERR_SHORT_READ",
	sqlite3.SQLITE_CORRUPT_SEQUENCE:        "SQLITE_CORRUPT_SEQUENCE",
	sqlite3.SQLITE_CANTOPEN_ISDIR:          "SQLITE_CANTOPEN_ISDIR",
	sqlite3.SQLITE_CONSTRAINT_COMMITHOOK:   "SQLITE_CONSTRAINT_COMMITHOOK",
	sqlite3.SQLITE_NOTICE_RECOVER_ROLLBACK: "SQLITE_NOTICE_RECOVER_ROLLBACK",
	sqlite3.SQLITE_ERROR_SNAPSHOT:          "SQLITE_ERROR_SNAPSHOT",
	sqlite3.SQLITE_BUSY_TIMEOUT:            "SQLITE_BUSY_TIMEOUT",
	sqlite3.SQLITE_READONLY_ROLLBACK:       "SQLITE_READONLY_ROLLBACK",
	sqlite3.SQLITE_IOERR_WRITE:             "SQLITE_IOERR_WRITE",
	sqlite3.SQLITE_CORRUPT_INDEX:           "SQLITE_CORRUPT_INDEX",
	sqlite3.SQLITE_CANTOPEN_FULLPATH:       "SQLITE_CANTOPEN_FULLPATH",
	sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:   "SQLITE_CONSTRAINT_FOREIGNKEY",
	sqlite3.SQLITE_NOTICE_RBU:              "SQLITE_NOTICE_RBU",
	sqlite3.SQLITE_ERROR_RESERVESIZE:       "SQLITE_ERROR_RESERVESIZE",
	sqlite3.SQLITE_READONLY_DBMOVED:        "SQLITE_READONLY_DBMOVED",
	sqlite3.SQLITE_IOERR_FSYNC:             "SQLITE_IOERR_FSYNC",
	sqlite3.SQLITE_CANTOPEN_CONVPATH:       "SQLITE_CANTOPEN_CONVPATH",
	sqlite3.SQLITE_CONSTRAINT_FUNCTION:     "SQLITE_CONSTRAINT_FUNCTION",
	sqlite3.SQLITE_ERROR_KEY:               "SQLITE_ERROR_KEY",
	sqlite3.SQLITE_READONLY_CANTINIT:       "SQLITE_READONLY_CANTINIT",
	sqlite3.SQLITE_IOERR_DIR_FSYNC:         "SQLITE_IOERR_DIR_FSYNC",
	sqlite3.SQLITE_CANTOPEN_DIRTYWAL:       "SQLITE_CANTOPEN_DIRTYWAL",
	sqlite3.SQLITE_CONSTRAINT_NOTNULL:      "SQLITE_CONSTRAINT_NOTNULL",
	sqlite3.SQLITE_ERROR_UNABLE:            "SQLITE_ERROR_UNABLE",
	sqlite3.SQLITE_READONLY_DIRECTORY:      "SQLITE_READONLY_DIRECTORY",
	sqlite3.SQLITE_IOERR_TRUNCATE:          "SQLITE_IOERR_TRUNCATE",
	sqlite3.SQLITE_CANTOPEN_SYMLINK:        "SQLITE_CANTOPEN_SYMLINK",
	sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:   "SQLITE_CONSTRAINT_PRIMARYKEY",
	sqlite3.SQLITE_IOERR_FSTAT:             "SQLITE_IOERR_FSTAT",
	sqlite3.SQLITE_CONSTRAINT_TRIGGER:      "SQLITE_CONSTRAINT_TRIGGER",
	sqlite3.SQLITE_IOERR_UNLOCK:            "SQLITE_IOERR_UNLOCK",
	sqlite3.SQLITE_CONSTRAINT_UNIQUE:       "SQLITE_CONSTRAINT_UNIQUE",
	sqlite3.SQLITE_IOERR_RDLOCK:            "SQLITE_IOERR_RDLOCK",
	sqlite3.SQLITE_CONSTRAINT_VTAB:         "SQLITE_CONSTRAINT_VTAB",
	sqlite3.SQLITE_IOERR_DELETE:            "SQLITE_IOERR_DELETE",
	sqlite3.SQLITE_CONSTRAINT_ROWID:        "SQLITE_CONSTRAINT_ROWID",
	sqlite3.SQLITE_IOERR_BLOCKED:           "SQLITE_IOERR_BLOCKED",
	sqlite3.SQLITE_CONSTRAINT_PINNED:       "SQLITE_CONSTRAINT_PINNED",
	sqlite3.SQLITE_IOERR_NOMEM:             "SQLITE_IOERR_NOMEM",
	sqlite3.SQLITE_CONSTRAINT_DATATYPE:     "SQLITE_CONSTRAINT_DATATYPE",
	sqlite3.SQLITE_IOERR_ACCESS:            "SQLITE_IOERR_ACCESS",
	sqlite3.SQLITE_IOERR_CHECKRESERVEDLOCK: "SQLITE_IOERR_CHECKRESERVEDLOCK",
	sqlite3.SQLITE_IOERR_LOCK:              "SQLITE_IOERR_LOCK",
	sqlite3.SQLITE_IOERR_CLOSE:             "SQLITE_IOERR_CLOSE",
	sqlite3.SQLITE_IOERR_DIR_CLOSE:         "SQLITE_IOERR_DIR_CLOSE",
	sqlite3.SQLITE_IOERR_SHMOPEN:           "SQLITE_IOERR_SHMOPEN",
	sqlite3.SQLITE_IOERR_SHMSIZE:           "SQLITE_IOERR_SHMSIZE",
	sqlite3.SQLITE_IOERR_SHMLOCK:           "SQLITE_IOERR_SHMLOCK",
	sqlite3.SQLITE_IOERR_SHMMAP:            "SQLITE_IOERR_SHMMAP",
	sqlite3.SQLITE_IOERR_SEEK:              "SQLITE_IOERR_SEEK",
	sqlite3.SQLITE_IOERR_DELETE_NOENT:      "SQLITE_IOERR_DELETE_NOENT",
	sqlite3.SQLITE_IOERR_MMAP:              "SQLITE_IOERR_MMAP",
	sqlite3.SQLITE_IOERR_GETTEMPPATH:       "SQLITE_IOERR_GETTEMPPATH",
	sqlite3.SQLITE_IOERR_CONVPATH:          "SQLITE_IOERR_CONVPATH",
	sqlite3.SQLITE_IOERR_VNODE:             "SQLITE_IOERR_VNODE",
	sqlite3.SQLITE_IOERR_AUTH:              "SQLITE_IOERR_AUTH",
	sqlite3.SQLITE_IOERR_BEGIN_ATOMIC:      "SQLITE_IOERR_BEGIN_ATOMIC",
	sqlite3.SQLITE_IOERR_COMMIT_ATOMIC:     "SQLITE_IOERR_COMMIT_ATOMIC",
	sqlite3.SQLITE_IOERR_ROLLBACK_ATOMIC:   "SQLITE_IOERR_ROLLBACK_ATOMIC",
	sqlite3.SQLITE_IOERR_DATA:              "SQLITE_IOERR_DATA",
	sqlite3.SQLITE_IOERR_CORRUPTFS:         "SQLITE_IOERR_CORRUPTFS",
	sqlite3.SQLITE_IOERR_IN_PAGE:           "SQLITE_IOERR_IN_PAGE",
	sqlite3.SQLITE_IOERR_BADKEY:            "SQLITE_IOERR_BADKEY",
	sqlite3.SQLITE_IOERR_CODEC:             "SQLITE_IOERR_CODEC",
}
