//go:build !unix

package sqlite

import (
	"errors"
	"os"
)

var errLocked = errors.New("locked")

// tryLock takes no lock where flock is not available; running two brokers on one file there
// is not detected.
func tryLock(*os.File) error { return nil }
