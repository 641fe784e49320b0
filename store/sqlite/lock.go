package sqlite

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// One SQLite file serves one broker. A second broker on the same file would not see the first
// one's leases, breakers or queue caps (they live in each broker's memory), so both would hand
// out work the other believes it owns. LockFile makes the second broker refuse to start instead.
//
// The lock is an advisory file lock (flock) on a file beside the database. The kernel drops it
// when the process ends, however it ends, so a broker killed with SIGKILL never leaves a stale
// lock behind; the pid and address written into the file are only there to name the holder.

// InUseError is returned by LockFile when another process holds the database's lock.
type InUseError struct {
	DB string
	// PID and Addr name the broker that holds the lock, as it wrote them; either may be empty
	// when the holder had not written them yet.
	PID  string
	Addr string
}

func (e *InUseError) Error() string {
	holder := "another broker"
	switch {
	case e.PID != "" && e.Addr != "":
		holder = fmt.Sprintf("another broker (pid %s, listening on %s)", e.PID, e.Addr)
	case e.PID != "":
		holder = fmt.Sprintf("another broker (pid %s)", e.PID)
	}
	return fmt.Sprintf("database %s is already in use by %s; one SQLite file serves one broker", e.DB, holder)
}

// LockPath is the lock file that LockFile takes for the database at path.
func LockPath(path string) string { return path + ".lock" }

// LockFile takes the exclusive broker lock of the database at path and records owner (the
// broker's listening address) and this process's pid in it. It fails with *InUseError when
// another process holds the lock. release gives the lock up; the lock also ends with the
// process. In-memory databases need no lock.
func LockFile(path, owner string) (release func(), err error) {
	if path == ":memory:" || strings.HasPrefix(path, "file:") {
		return func() {}, nil
	}
	f, err := os.OpenFile(LockPath(path), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock database %s: %w", path, err)
	}
	if err := tryLock(f); err != nil {
		defer f.Close()
		if errors.Is(err, errLocked) {
			return nil, inUse(path, f)
		}
		return nil, fmt.Errorf("lock database %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("pid %d\naddr %s\n", os.Getpid(), owner)), 0)
	}
	return func() {
		_ = f.Truncate(0)
		_ = f.Close() // closing the descriptor releases the lock
	}, nil
}

// inUse reads the holder's pid and address from the lock file.
func inUse(path string, f *os.File) *InUseError {
	e := &InUseError{DB: path}
	b := make([]byte, 512)
	n, _ := f.ReadAt(b, 0)
	for _, line := range strings.Split(string(b[:n]), "\n") {
		k, v, _ := strings.Cut(line, " ")
		switch k {
		case "pid":
			if _, err := strconv.Atoi(v); err == nil {
				e.PID = v
			}
		case "addr":
			e.Addr = v
		}
	}
	return e
}
