package client

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job"
)

// UniqueOpts make a job unique: while a job of the same type (and queue) with the same unique
// key is in one of States, or within the same Period, an enqueue stores nothing and answers
// with that job, Duplicate and DuplicateByUnique set. The zero value makes a job unique by type
// and queue alone. Unlike an idempotency key, which names one request and must be repeated
// with the same content, a unique key names the work: a job of other content for the same
// work is a duplicate too, and the key is free again once its job leaves States.
type UniqueOpts struct {
	// Key is a key of your own, such as a customer id.
	Key string
	// ByPayload adds a hash of the whole payload to the key.
	ByPayload bool
	// Fields adds the values of payload fields ("payload.customer_id", "payload.a.b") or
	// metadata values ("metadata.tenant") to the key.
	Fields []string
	// AcrossQueues leaves the queue out of the key.
	AcrossQueues bool
	// Period makes the job unique within its window of this length (windows are aligned to
	// the Unix epoch, UTC), the one its run time falls in: at most one job per window.
	Period time.Duration
	// States in which a job holds its key; they must include SCHEDULED, PENDING and RUNNING.
	// Empty: while it waits or runs, or with a Period, in every state.
	States []job.State
}

// Unique makes the job unique (see UniqueOpts).
func Unique(u UniqueOpts) EnqueueOption {
	return enqueueOptionFunc(func(s *JobSpec) { s.Unique = &u })
}

func uniqueToProto(u *UniqueOpts) *jobwirev1.UniqueOptions {
	if u == nil {
		return nil
	}
	pb := &jobwirev1.UniqueOptions{Key: u.Key, ByPayload: u.ByPayload, Fields: u.Fields,
		AcrossQueues: u.AcrossQueues}
	if u.Period != 0 {
		pb.Period = durationpb.New(u.Period)
	}
	for _, s := range u.States {
		pb.States = append(pb.States, jobwirev1.JobState(s))
	}
	return pb
}
