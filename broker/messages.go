package broker

import (
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/triage"
)

// Message is something the broker sends down a worker's stream. The transport turns each
// concrete type into its wire form.
type Message interface{ isMessage() }

// Assignment hands a leased job to a worker.
type Assignment struct {
	Job            *job.Job
	Attempt        int
	Token          job.LeaseToken
	LeaseDeadline  time.Time
	AttemptTimeout time.Duration
	// Parents are the results of the job's parents, in the order the producer named them
	// (deps.go); nil for a job without parents.
	Parents []store.ParentInfo
}

// ResultAck says a result is stored and what was decided.
type ResultAck struct {
	Ref      job.LeaseRef
	Decision triage.Decision
}

// HeartbeatAck lists the leases a heartbeat extended.
type HeartbeatAck struct {
	Extended []job.LeaseRef
	Deadline time.Time
}

// Refusal says why a worker message was not applied.
type Refusal int

const (
	// RefusedStale: the lease is not current or the job is finished; nothing changed.
	RefusedStale Refusal = iota + 1
	// RefusedBusy: storage was busy; the worker should send the message again.
	RefusedBusy
	// RefusedInvalid: the message breaks a rule of its own (a progress fraction outside 0..1);
	// nothing changed, and sending it again changes nothing either.
	RefusedInvalid
)

// About names the worker message a Refused answers.
type About int

const (
	AboutStarted About = iota + 1
	AboutHeartbeat
	AboutResult
	AboutRelease
	AboutProgress
)

// Refused answers a worker message that changed nothing.
type Refused struct {
	Ref     job.LeaseRef
	About   About
	Reason  Refusal
	Message string
}

// CancelReason says why the broker cancelled a job on a worker.
type CancelReason int

const (
	CancelRequested CancelReason = iota + 1
	CancelTimeout
	CancelLeaseLost
)

// Cancel tells a worker to stop a job; the broker has already recorded the outcome.
type Cancel struct {
	Ref    job.LeaseRef
	Reason CancelReason
}

// Drain asks a worker to stop taking work and disconnect.
type Drain struct{ Reason string }

// Welcome answers a worker's hello.
type Welcome struct {
	SessionID         string
	LeaseDuration     time.Duration
	HeartbeatInterval time.Duration
	Lost              []job.LeaseRef
	// MaxResultBytes is the largest result a success may carry.
	MaxResultBytes int
}

func (Assignment) isMessage()   {}
func (ResultAck) isMessage()    {}
func (HeartbeatAck) isMessage() {}
func (Refused) isMessage()      {}
func (Cancel) isMessage()       {}
func (Drain) isMessage()        {}
func (Welcome) isMessage()      {}
