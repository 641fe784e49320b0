package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jobwire/jobwire/job"
)

// Dependencies between jobs. A job enqueued with parents is inserted as any other and then
// made to wait for them (DepsTx.JobDepsAdd) in the same transaction: state WAITING, one edge per
// parent. Every write that makes a job final (a result, an expired lease or attempt, a cancel)
// settles its edges in its own transaction, at its end: a dependent whose parents all
// SUCCEEDED (or all ended, for one that runs anyway) becomes PENDING, one whose parent went
// DEAD or CANCELLED is CANCELLED with that parent named, and its own dependents are settled in
// turn; its batch, if any, counts that cancel in the same transaction. Requeueing a dead
// parent brings such dependents back, WAITING (Tx.JobRequeue). A store that can be shared by
// several brokers tells every one of them when jobs became ready this way, and which jobs its
// settling cancelled or a requeue revived; a store alone tells its own broker
// (DependentsNotifier, DependentsChangedNotifier).

// MaxParents is the most parents one job may name.
const MaxParents = 1000

// JobDepsParams makes one just-inserted job wait for its parents.
type JobDepsParams struct {
	Child int64
	// Parents are stored jobs or jobs of the same transaction, in the order the producer named
	// them, each once.
	Parents   []int64
	RunAnyway bool
	// Graph is the id of the first job of the graph the job belongs to; 0: none. A job of a
	// graph without parents is listed with Parents empty.
	Graph int64
	Now   time.Time
}

// DepsError is a parent that cannot be depended on: it does not exist (State 0), or it ended
// DEAD or CANCELLED and the dependent does not run anyway.
type DepsError struct {
	Child, Parent int64
	State         job.State
}

func (e *DepsError) Error() string {
	if e.State == 0 {
		return fmt.Sprintf("job %d depends on job %d, which does not exist", e.Child, e.Parent)
	}
	return fmt.Sprintf("job %d depends on job %d, which is %s already: it could never run "+
		"(enqueue it with run_if_parents_fail to run it anyway)", e.Child, e.Parent, e.State)
}

// Is makes a missing parent match ErrNotFound.
func (e *DepsError) Is(target error) bool { return target == ErrNotFound && e.State == 0 }

// ParentInfo is one parent of a job, as its dependent and its worker see it.
type ParentInfo struct {
	ID    int64
	Type  string
	State job.State
	// Result is what the parent's Success returned; nil when none (or the parent did not
	// succeed).
	Result []byte
}

// JobDeps is where a job stands among its parents and dependents.
type JobDeps struct {
	Parents     []ParentInfo // in the order the producer named them
	Dependents  []int64      // by id
	Graph       int64
	RunAnyway   bool
	ParentsLeft int
	CancelledBy int64
}

// DepsTx is the part of a transaction that writes dependencies.
type DepsTx interface {
	// JobDepsAdd makes each job ps[i].Child, inserted by this transaction, wait for its
	// parents: states[i] is WAITING, or 0 when every parent has SUCCEEDED already (or ended,
	// for one that runs anyway) and the job is left as it was inserted. Parents are locked (shared) in
	// id order first, so that none of them becomes final unseen. A parent that does not exist,
	// or that is DEAD or CANCELLED when the child does not run anyway, fails it with a
	// *DepsError; the caller must roll back.
	JobDepsAdd(ps []*JobDepsParams) ([]job.State, error)
}

// DepsReader reads dependencies outside a write.
type DepsReader interface {
	// JobDepsGet reads a job's dependencies; nil when it has neither parents nor dependents
	// nor a graph.
	JobDepsGet(ctx context.Context, id int64) (*JobDeps, error)
	// ParentResults reads the parents of job id in the order the producer named them.
	ParentResults(ctx context.Context, id int64) ([]ParentInfo, error)
	// GraphGet reads the jobs of a graph without payloads, in id order, and their
	// dependencies by job id; ErrNotFound when the graph has no job.
	GraphGet(ctx context.Context, graph int64) ([]*job.Job, map[int64]*JobDeps, error)
}

// DependentsNotifier is a store that calls fn after a commit that made waiting jobs ready (or
// enqueued a batch's callbacks, which a dependent cancelled by its parent's failure may
// complete in a write that names no batch), for its broker to plan a dispatch round. A store
// shared by several brokers publishes an EventReady too, which every broker hears.
type DependentsNotifier interface {
	OnDependentsReady(fn func())
}

// DependentsChangedNotifier is a store that calls fn, after a commit, with the ids of the
// waiting jobs its settling cancelled (a parent went DEAD or CANCELLED) and of the cancelled
// jobs a requeue revived: no write of the broker names them, so its watches hear of them only
// this way (or at their backstop read). A write that changes no dependent calls nothing. A
// store shared by several brokers also publishes an EventJob with those ids, for the others'
// watches.
type DependentsChangedNotifier interface {
	OnDependentsChanged(fn func(ids []int64))
}

// ParentFailedType is the last_error_type of a job cancelled because a parent went DEAD or
// CANCELLED; its last_error_message is ParentFailedMessage.
const ParentFailedType = "PARENT_FAILED"

// ParentFailedMessage names the parent that cancelled its dependent (the PostgreSQL store's
// jobwire_settle_dependents writes the same sentence).
func ParentFailedMessage(parent int64, state job.State) string {
	return fmt.Sprintf("parent job %d ended %s", parent, state)
}

// CheckParents refuses p when a parent is missing from states (it does not exist) or, unless p
// runs anyway, is DEAD or CANCELLED; parents are checked in the order p names them.
func CheckParents(p *JobDepsParams, states map[int64]job.State) error {
	for _, parent := range p.Parents {
		st, ok := states[parent]
		if !ok {
			return &DepsError{Child: p.Child, Parent: parent}
		}
		if !p.RunAnyway && (st == job.StateDead || st == job.StateCancelled) {
			return &DepsError{Child: p.Child, Parent: parent, State: st}
		}
	}
	return nil
}
