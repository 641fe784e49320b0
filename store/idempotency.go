package store

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// ErrIdempotencyConflict is matched, with errors.Is, by the error an insert returns when its
// idempotency key already names a job of its type whose content differs from the insert.
var ErrIdempotencyConflict = errors.New("idempotency key conflict")

// IdempotencyConflictError is an insert whose idempotency key belongs to a different job. A
// repeat of the same request is a duplicate and answered with the existing job; a request that
// reuses the key for other content is a mistake the producer must hear about, not a job that
// silently never runs.
type IdempotencyConflictError struct {
	// Index is the insert's position among those of one call.
	Index int
	Type  string
	Key   string
	// JobID is the job that holds the key.
	JobID int64
	// Fields names what differs, in the order of IdempotencyFields.
	Fields []string
}

func (e *IdempotencyConflictError) Error() string {
	verb := "differs"
	if len(e.Fields) > 1 {
		verb = "differ"
	}
	return fmt.Sprintf("idempotency key %q of type %q belongs to job %d, whose %s %s from this request; "+
		"repeat that job's request unchanged, or use another key", e.Key, e.Type, e.JobID, list(e.Fields), verb)
}

// Is makes errors.Is(err, ErrIdempotencyConflict) true.
func (e *IdempotencyConflictError) Is(target error) bool { return target == ErrIdempotencyConflict }

// IdempotencyFields are what a repeated insert must match, besides its type, to be a duplicate
// of the job holding its key. The schedule is left out: a delay counts from the call, so the
// same request sent twice asks for two different times.
var IdempotencyFields = []string{"queue", "payload", "priority", "max_attempts", "attempt_timeout"}

// IdempotencyDiff lists the IdempotencyFields in which p differs from stored, the insert that
// created the job holding p's key. Both carry the values the broker resolved (a default filled
// in), not what the caller left unset.
func IdempotencyDiff(p, stored *JobInsertParams) []string {
	var out []string
	if p.Queue != stored.Queue {
		out = append(out, "queue")
	}
	if !bytes.Equal(p.Payload, stored.Payload) {
		out = append(out, "payload")
	}
	if p.Priority != stored.Priority {
		out = append(out, "priority")
	}
	if p.MaxAttempts != stored.MaxAttempts {
		out = append(out, "max_attempts")
	}
	if p.AttemptTimeout != stored.AttemptTimeout {
		out = append(out, "attempt_timeout")
	}
	return out
}

// list joins names as "a", "a and b" or "a, b and c".
func list(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
