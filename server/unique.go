package server

import (
	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/job/unique"
)

// uniqueFromProto is the broker's form of a spec's unique options (nil: none).
func uniqueFromProto(u *jobwirev1.UniqueOptions) *unique.Options {
	if u == nil {
		return nil
	}
	out := &unique.Options{Key: u.GetKey(), ByPayload: u.GetByPayload(), Fields: u.GetFields(),
		AcrossQueues: u.GetAcrossQueues(), Period: u.GetPeriod().AsDuration()}
	for _, s := range u.GetStates() {
		out.States = append(out.States, job.State(s))
	}
	return out
}

// validateUnique checks a spec's unique options; field names them ("job.unique").
func validateUnique(field string, u *jobwirev1.UniqueOptions) error {
	if u == nil {
		return nil
	}
	if p := u.GetPeriod(); p != nil {
		if err := p.CheckValid(); err != nil {
			return invalid(field+".period", "is not a valid duration: %v", err)
		}
	}
	if err := uniqueFromProto(u).Check(); err != nil {
		return invalid(field, "%s", trimInvalid(err))
	}
	return nil
}

// trimInvalid is the message of a unique.ErrInvalid error without its prefix.
func trimInvalid(err error) string {
	msg := err.Error()
	prefix := unique.ErrInvalid.Error() + ": "
	if len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
		return msg[len(prefix):]
	}
	return msg
}

// duplicateBy says which key made an enqueue a duplicate.
func duplicateBy(r broker.Enqueued) jobwirev1.DuplicateBy {
	switch {
	case !r.Duplicate:
		return jobwirev1.DuplicateBy_DUPLICATE_BY_UNSPECIFIED
	case r.Unique:
		return jobwirev1.DuplicateBy_DUPLICATE_BY_UNIQUE
	}
	return jobwirev1.DuplicateBy_DUPLICATE_BY_IDEMPOTENCY_KEY
}
