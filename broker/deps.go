package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// Dependencies between jobs. A job enqueued with parents (JobSpec.Deps) is stored WAITING in
// the transaction that inserts it, one edge per parent; the store settles the edges of every
// job a transaction makes final in that same transaction (store/deps.go), so a dependent is
// made ready (or cancelled, naming its parent) exactly when its last parent's final state
// commits, whichever broker wrote it. The broker's part is to build the graph a producer sends,
// refuse what cannot run, wake dispatch when dependents became ready, and hand a dependent's
// worker its parents' results.

// DepsSpec names the jobs a job runs after.
type DepsSpec struct {
	// Parents are ids of stored jobs, in the order the producer named them.
	Parents []int64
	// RunAnyway runs the job once every parent is final, whatever their outcome; without it a
	// parent that goes DEAD or CANCELLED cancels the job.
	RunAnyway bool
}

// GraphNode is one job of a graph enqueued in one call (EnqueueGraph).
type GraphNode struct {
	// Key names the node within the call.
	Key  string
	Spec JobSpec
	// DependsOn are keys of the call's nodes this one runs after; Spec.Deps may name stored
	// jobs too.
	DependsOn []string
}

// ErrBadGraph is matched by the error of a graph that cannot be stored: a cycle, a key named
// twice or unknown, a scheduled job with parents.
var ErrBadGraph = errors.New("invalid dependencies")

// ErrParentFailed is matched by the error of an enqueue whose parent is DEAD or CANCELLED
// already, when the dependent does not run anyway: it could never run.
var ErrParentFailed = errors.New("parent failed")

// graphError names the node of a graph (or the spec of an enqueue) that is wrong.
type graphError struct {
	where string
	msg   string
	is    error
}

func (e *graphError) Error() string { return e.where + ": " + e.msg }
func (e *graphError) Is(target error) bool {
	return target == e.is
}

func badNode(key, format string, args ...any) error {
	return &graphError{where: fmt.Sprintf("node %q", key), msg: fmt.Sprintf(format, args...), is: ErrBadGraph}
}

// orderGraph returns the order in which nodes can be stored, every parent before its
// dependents (Kahn's algorithm, ties in the request's order), and each node's parents within
// the call, by index, in the order named; or an error naming the first node that is wrong.
func orderGraph(nodes []GraphNode) (order []int, local [][]int, err error) {
	index := make(map[string]int, len(nodes))
	for i, n := range nodes {
		if _, dup := index[n.Key]; dup {
			return nil, nil, badNode(n.Key, "the key is used by two nodes; keys must be unique in a graph")
		}
		index[n.Key] = i
	}
	local = make([][]int, len(nodes))
	children := make([][]int, len(nodes))
	waiting := make([]int, len(nodes))
	for i, n := range nodes {
		if local[i], err = nodeParents(n, index); err != nil {
			return nil, nil, err
		}
		for _, p := range local[i] {
			children[p] = append(children[p], i)
		}
		waiting[i] = len(local[i])
	}
	for i := range nodes {
		if waiting[i] == 0 {
			order = append(order, i)
		}
	}
	for next := 0; next < len(order); next++ {
		for _, c := range children[order[next]] {
			if waiting[c]--; waiting[c] == 0 {
				order = append(order, c)
			}
		}
	}
	if len(order) < len(nodes) {
		return nil, nil, cycleError(nodes, waiting)
	}
	return order, local, nil
}

// nodeParents are n's parents within the call, by index.
func nodeParents(n GraphNode, index map[string]int) ([]int, error) {
	seen := make(map[string]bool, len(n.DependsOn))
	out := make([]int, 0, len(n.DependsOn))
	for _, k := range n.DependsOn {
		p, ok := index[k]
		switch {
		case !ok:
			return nil, badNode(n.Key, "depends on %q, which is no node of the graph", k)
		case k == n.Key:
			return nil, badNode(n.Key, "depends on itself")
		case seen[k]:
			return nil, badNode(n.Key, "names %q twice", k)
		}
		seen[k] = true
		out = append(out, p)
	}
	if n.Spec.Deps != nil && len(n.Spec.Deps.Parents)+len(out) > store.MaxParents {
		return nil, badNode(n.Key, "has more than %d parents", store.MaxParents)
	}
	return out, nil
}

// cycleError names the nodes left waiting by orderGraph: each is on a cycle or after one.
func cycleError(nodes []GraphNode, waiting []int) error {
	var keys []string
	for i, w := range waiting {
		if w > 0 {
			keys = append(keys, fmt.Sprintf("%q", nodes[i].Key))
		}
	}
	if len(keys) > 5 {
		keys = append(keys[:5], "...")
	}
	return badNode(nodes[firstWaiting(waiting)].Key, "is on a cycle of dependencies (nodes on or after it: %s)",
		strings.Join(keys, ", "))
}

func firstWaiting(waiting []int) int {
	for i, w := range waiting {
		if w > 0 {
			return i
		}
	}
	return 0
}

// EnqueueGraph stores nodes, a graph of jobs, in one transaction: all or nothing. It returns
// the graph's id (its first job's) and what became of each node, in the order of nodes.
func (b *Broker) EnqueueGraph(ctx context.Context, nodes []GraphNode) (int64, []Enqueued, error) {
	order, local, err := orderGraph(nodes)
	if err != nil {
		return 0, nil, err
	}
	specs := make([]JobSpec, len(order))
	where := make([]string, len(order))
	parents := make([][]int, len(order))
	at := make([]int, len(nodes)) // each node's place in order
	for i, n := range order {
		at[n] = i
	}
	for i, n := range order {
		specs[i], where[i] = nodes[n].Spec, fmt.Sprintf("node %q", nodes[n].Key)
		for _, p := range local[n] {
			parents[i] = append(parents[i], at[p])
		}
	}
	res, err := b.enqueueDeps(ctx, &depsOp{specs: specs, where: where, local: parents, graph: true})
	if err != nil {
		return 0, nil, err
	}
	out := make([]Enqueued, len(nodes))
	for n := range nodes {
		out[n] = res[at[n]]
	}
	return res[0].ID, out, nil
}

// hasDeps reports whether some spec names parents: the enqueue then goes through depsOp.
func hasDeps(specs []JobSpec) bool {
	for i := range specs {
		if specs[i].Deps != nil && len(specs[i].Deps.Parents) > 0 {
			return true
		}
	}
	return false
}

// enqueueWithDeps stores specs, some of which name parents.
func (b *Broker) enqueueWithDeps(ctx context.Context, specs []JobSpec) ([]Enqueued, error) {
	return b.enqueueDeps(ctx, newDepsOp(specs))
}

// newDepsOp is the op that stores specs, some of which name parents, in one call of Enqueue
// or EnqueueBatch.
func newDepsOp(specs []JobSpec) *depsOp {
	where := make([]string, len(specs))
	for i := range specs {
		where[i] = "job"
		if len(specs) > 1 {
			where[i] = fmt.Sprintf("jobs[%d]", i)
		}
	}
	return &depsOp{specs: specs, where: where, local: make([][]int, len(specs))}
}

// enqueueDeps stores o's jobs and their edges through the writer.
func (b *Broker) enqueueDeps(ctx context.Context, o *depsOp) ([]Enqueued, error) {
	now := b.now()
	o.params = make([]*store.JobInsertParams, len(o.specs))
	for i := range o.specs {
		s := o.specs[i].withDefaults(b.cfg, now)
		if s.Deps != nil && len(s.Deps.Parents)+len(o.local[i]) > 0 && s.RunAt.After(now) {
			return nil, &graphError{where: o.where[i], is: ErrBadGraph,
				msg: "a job with parents runs when they are done: it cannot have run_at or delay"}
		}
		o.params[i] = s.insertParams(now)
	}
	o.now = now
	if err := b.doOp(ctx, o); err != nil {
		return nil, o.refusal(err)
	}
	out := make([]Enqueued, len(o.results))
	var earliest = o.results[0].RunAt
	for i, r := range o.results {
		out[i] = Enqueued{ID: r.ID, Duplicate: r.Duplicate, State: r.State, RunAt: r.RunAt}
		if !r.Duplicate {
			b.obs.JobEnqueued(o.params[i].Queue, o.params[i].Type)
		}
		if r.State == job.StateScheduled && r.RunAt.Before(earliest) {
			earliest = r.RunAt
		}
	}
	if earliest.After(now) {
		b.schedule(earliest)
	}
	return out, nil
}

// depsOp stores jobs with their parents: it inserts them, then makes those with parents wait
// (store.DepsTx.JobDepsAdd), then puts those that name a batch in it, in one transaction. It
// writes alone in its batch, and asks for a dispatch round, which leases those of its jobs that
// are ready in the same commit.
//
// A dependent may belong to a batch: however it ends, its batch counts it in the transaction
// that makes it final, a cancel because a parent failed included (the store counts the jobs
// its settling cancels), so its batch completes once, with it in its counts.
type depsOp struct {
	specs []JobSpec
	where []string // how an error names each spec
	local [][]int  // parents among the op's own jobs, by index (all earlier)
	graph bool     // the jobs are one graph, whose id is the first job's
	now   time.Time
	// create makes a new batch of every job, closed with them (EnqueueBatch with options);
	// batch is its id once stored. Without it each job goes to the open batch its spec names.
	create *store.BatchCreateParams
	batch  int64

	params  []*store.JobInsertParams
	results []store.JobInsertResult
}

func (o *depsOp) Name() string  { return "enqueue_deps" }
func (o *depsOp) Readies() bool { return true }
func (o *depsOp) Done(error)    {}

func (o *depsOp) Apply(tx store.Tx) error {
	if o.create != nil {
		var err error
		if o.batch, err = tx.BatchCreate(o.create); err != nil {
			return err
		}
	}
	results, err := tx.JobInsertMany(o.params)
	if err != nil {
		return err
	}
	o.results = results
	var ps []*store.JobDepsParams
	for i, r := range results {
		p := o.depsParams(i)
		if r.Duplicate || (p.Graph == 0 && len(p.Parents) == 0) {
			continue
		}
		ps = append(ps, p)
	}
	states, err := tx.JobDepsAdd(ps)
	if err != nil {
		return err
	}
	for i, p := range ps {
		if states[i] == job.StateWaiting {
			o.results[o.indexOf(p.Child)].State = job.StateWaiting
		}
	}
	// The batch's round leases its ready jobs here; the other brokers' idle workers hear of
	// them as of any enqueue's.
	if slices.ContainsFunc(o.results, func(r store.JobInsertResult) bool { return !r.Duplicate && r.State == job.StatePending }) {
		tx.Publish(readyEvent)
	}
	return o.addToBatches(tx)
}

// addToBatches puts the jobs the op stored (not the duplicates of earlier ones) in their
// batches, in batch id order, and closes the batch the op creates. A batch closed or missing
// fails the whole op: nothing of it is stored.
func (o *depsOp) addToBatches(tx store.Tx) error {
	byBatch := map[int64][]int64{}
	for i, r := range o.results {
		batch := o.specs[i].Batch
		if o.create != nil {
			batch = o.batch
		}
		if batch != 0 && !r.Duplicate {
			byBatch[batch] = append(byBatch[batch], r.ID)
		}
	}
	for _, batch := range slices.Sorted(maps.Keys(byBatch)) {
		if err := tx.BatchAdd(batch, byBatch[batch]); err != nil {
			return err
		}
	}
	if o.create == nil {
		return nil
	}
	_, err := tx.BatchClose(o.batch, o.now)
	return err
}

// depsParams are the edges of job i, once the op's jobs have ids.
func (o *depsOp) depsParams(i int) *store.JobDepsParams {
	p := &store.JobDepsParams{Child: o.results[i].ID, Now: o.now}
	if d := o.specs[i].Deps; d != nil {
		p.Parents, p.RunAnyway = append(p.Parents, d.Parents...), d.RunAnyway
	}
	for _, l := range o.local[i] {
		p.Parents = append(p.Parents, o.results[l].ID)
	}
	if o.graph {
		p.Graph = o.results[0].ID
	}
	return p
}

func (o *depsOp) indexOf(id int64) int {
	for i, r := range o.results {
		if r.ID == id {
			return i
		}
	}
	return -1
}

// refusal names the spec a parent was refused for.
func (o *depsOp) refusal(err error) error {
	var de *store.DepsError
	if !errors.As(err, &de) {
		return err
	}
	where := "job"
	if i := o.indexOf(de.Child); i >= 0 {
		where = o.where[i]
	}
	if de.State == 0 {
		return &graphError{where: where, is: ErrNotFound, msg: fmt.Sprintf("depends on job %d, which does not exist", de.Parent)}
	}
	return &graphError{where: where, is: ErrParentFailed, msg: fmt.Sprintf("depends on job %d, which is %s already: "+
		"it could never run (enqueue it to run whatever its parents' outcome to run it anyway)", de.Parent, de.State)}
}

// watchDependents has st, the broker's store, tell the broker when a commit made waiting jobs
// ready, for a dispatch round to lease them, and which waiting jobs its settling cancelled (or
// a requeue revived), for the watches of those jobs: no write of the broker names them. A
// store shared by brokers tells the others with events.
func (b *Broker) watchDependents(st store.Store) {
	st.OnDependentsReady(b.signal)
	st.OnDependentsChanged(func(ids []int64) { b.jobsChanged(changeAny, ids...) })
}

// Deps reads a job's parents, dependents and graph; nil when it has none.
func (b *Broker) Deps(ctx context.Context, id int64) (*store.JobDeps, error) {
	return b.st.JobDepsGet(ctx, id)
}

// Graph reads the jobs of a graph, with their dependencies by id.
func (b *Broker) Graph(ctx context.Context, graph int64) ([]*job.Job, map[int64]*store.JobDeps, error) {
	return b.st.GraphGet(ctx, graph)
}

// CancelGraph cancels every job of a graph that has not finished, parents first (so that
// their waiting dependents are cancelled with them), and returns how many it cancelled. A job
// that finishes meanwhile is left as it is.
func (b *Broker) CancelGraph(ctx context.Context, graph int64) (int, error) {
	jobs, _, err := b.st.GraphGet(ctx, graph)
	if err != nil {
		return 0, err
	}
	open := map[int64]bool{}
	for _, j := range jobs {
		if j.State.Final() {
			continue
		}
		open[j.ID] = true
		if _, err := b.Cancel(ctx, j.ID); err != nil && !errors.Is(err, ErrFinished) {
			return 0, err
		}
	}
	// Counted afterwards: a cancelled parent cancels its waiting dependents with it.
	after, _, err := b.st.GraphGet(ctx, graph)
	n := 0
	for _, j := range after {
		if open[j.ID] && j.State == job.StateCancelled {
			n++
		}
	}
	return n, err
}

// withParents gives each assignment of msgs whose job has parents their results, read as it is
// sent: on the stream's goroutine, never the writer's. A job whose parents' results cannot be
// read (the read's retries ran out) is not sent without them, which would run its handler on
// inputs missing without a word: its lease is handed back (handBack), logged, and the job is
// offered again.
func (s *Session) withParents(ctx context.Context, msgs []Message) []Message {
	out := msgs[:0]
	for _, m := range msgs {
		if a, ok := m.(Assignment); ok && a.Job != nil && a.Job.Parents > 0 {
			ps, err := s.b.st.ParentResults(ctx, a.Job.ID)
			if err != nil {
				s.b.log.Warn("could not read the parents' results of a job; it waits for the next worker", "job", a.Job.ID, "err", err)
				s.handBack(job.LeaseRef{JobID: a.Job.ID, Token: a.Token})
				continue
			}
			a.Parents = ps
			m = a
		}
		out = append(out, m)
	}
	return out
}

// JobDeps is where a job stands among its parents and dependents (store.JobDeps).
type JobDeps = store.JobDeps

// ParentInfo is one parent of a job with its state and result (store.ParentInfo).
type ParentInfo = store.ParentInfo

// MaxParents is the most parents one job may name.
const MaxParents = store.MaxParents
