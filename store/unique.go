package store

import (
	"errors"
	"fmt"
)

// This file holds what the stores share for unique jobs (JobInsertParams.UniqueKey): a job's
// unique key is stored with the set of states in which it holds it, as a mask (unique.Mask,
// read back with its States), and each store keeps one job per key among the jobs whose state
// is in their own mask, with a unique index.

// ErrUniqueRace is returned when a unique key stayed taken for an insert's every try while
// its holder could not be read: the holder left its states each time between the insert and
// the read. The storage retries treat it as any failed write of the caller.
var ErrUniqueRace = errors.New("unique key kept changing hands")

// UniqueTries is how many times an insert whose unique key is taken looks for its holder.
const UniqueTries = 3

// UniqueRaceError says which key an insert could not settle.
func UniqueRaceError(key string) error {
	return fmt.Errorf("unique key %s: %w", key, ErrUniqueRace)
}
