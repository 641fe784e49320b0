package store

import "github.com/jobwire/jobwire/job"

// LeaseState is what a write fenced by a lease reads of its job when it matched no row: the
// job's state, attempt count and lease token. A job that does not exist has the zero token,
// which no lease matches.
type LeaseState struct {
	State    job.State
	Attempts int
	Token    job.LeaseToken
}

// Applied is the rule of Tx for writes fenced by a lease, run again after their commit: a write
// that matched no row reports success when the job already shows its effect, under the same
// lease token, with the same attempt count and in the state the write moves it to. Anything
// else, an older or newer token included, is stale.
func (s LeaseState) Applied(ref job.LeaseRef, state job.State, attempts int) bool {
	return s.Token == ref.Token && s.Attempts == attempts && s.State == state
}

// Released reports whether the job shows ref's release: PENDING under the same token (a new
// lease would have a new one). A release spends no attempt, so the attempt count cannot tell
// it from another.
func (s LeaseState) Released(ref job.LeaseRef) bool {
	return s.Token == ref.Token && s.State == job.StatePending
}
