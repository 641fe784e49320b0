package broker

import (
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/storeretry"
)

// The storage errors a broker call can return, under the broker's name so its callers match
// them without reaching for the store. Each is the store's own value: errors.Is matches an
// error from any layer.
var (
	// ErrNotFound: the job, queue or other record named does not exist.
	ErrNotFound = store.ErrNotFound
	// ErrBusy: the storage stayed busy through every retry; nothing was changed.
	ErrBusy = storeretry.ErrBusy
	// ErrUnavailable: the storage cannot be used until an operator fixes it; nothing was changed.
	ErrUnavailable = store.ErrUnavailable
	// ErrIdempotencyConflict: an idempotency key is held by a job that differs from the spec
	// (the error is an *IdempotencyConflictError).
	ErrIdempotencyConflict = store.ErrIdempotencyConflict
)

// IdempotencyConflictError names the spec, among those of one Enqueue, whose idempotency key
// is held by a different job, and what differs.
type IdempotencyConflictError = store.IdempotencyConflictError
