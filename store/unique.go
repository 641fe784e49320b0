package store

import (
	"errors"
	"fmt"

	"github.com/jobwire/jobwire/job"
)

// This file holds what the stores share for unique jobs (JobInsertParams.UniqueKey): a job's
// unique key is stored with the set of states in which it holds it, as a mask, and each store
// keeps one job per key among the jobs whose state is in their own mask, with a unique index.

// StatesOfMask lists the states of a stored mask (bit s for state s), in state order.
func StatesOfMask(m int) []job.State {
	var out []job.State
	for s := job.StateScheduled; s <= job.StateCancelled; s++ {
		if m&(1<<s) != 0 {
			out = append(out, s)
		}
	}
	return out
}

// MaskOfStates is the mask of states (StatesOfMask's inverse).
func MaskOfStates(states []job.State) int {
	m := 0
	for _, s := range states {
		m |= 1 << s
	}
	return m
}

// ErrUniqueRace is returned when a unique key stayed taken for an insert's every try while
// its holder could not be read: the holder left its states each time between the insert and
// the read. The storage retries treat it as any failed write of the caller.
var ErrUniqueRace = errors.New("unique key kept changing hands")

// uniqueTries is how many times an insert whose unique key is taken looks for its holder.
const UniqueTries = 3

// UniqueRaceError says which key an insert could not settle.
func UniqueRaceError(key string) error {
	return fmt.Errorf("unique key %s: %w", key, ErrUniqueRace)
}
