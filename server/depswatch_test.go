package server_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jobwire/jobwire/broker"
	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// The dependents a parent's failure cancels are cancelled by the store, in the parent's own
// write: no write of the broker names them. Their waits return as that write commits all the
// same, in every test here with no clock moved, so no backstop read (WatchPoll) is involved.

// chain is a parent and two levels of dependents: child runs after parent, grandchild after
// child.
type chain struct{ parent, child, grandchild int64 }

// newChain enqueues a chain through b, the parent of type "parent", the others of type "child".
func newChain(t *testing.T, b *brokertest.Bundle) chain {
	t.Helper()
	var c chain
	c.parent = enqueue(t, b, &jobwirev1.JobSpec{Type: "parent"})
	c.child = enqueue(t, b, &jobwirev1.JobSpec{Type: "child", DependsOn: []int64{c.parent}})
	c.grandchild = enqueue(t, b, &jobwirev1.JobSpec{Type: "child", DependsOn: []int64{c.child}})
	return c
}

// failParent has w, a worker of parent jobs on any broker, fail the chain's parent FATAL.
func (c chain) failParent(t *testing.T, w *brokertest.RawWorker) {
	t.Helper()
	runOne(t, w, c.parent, "ValueError")
}

// checkCancelled fails t unless jobs are the chain's dependents, each CANCELLED naming its
// parent: the child the parent, DEAD; the grandchild the child, CANCELLED.
func (c chain) checkCancelled(t *testing.T, jobs []*job.Job) {
	t.Helper()
	want := []struct {
		id  int64
		msg string
	}{{c.child, "parent job " + itoa(c.parent) + " ended DEAD"}, {c.grandchild, "parent job " + itoa(c.child) + " ended CANCELLED"}}
	if len(jobs) != len(want) {
		t.Fatalf("waited for %d jobs, want %d", len(jobs), len(want))
	}
	for i, w := range want {
		var je *client.JobError
		if err := client.JobErr(jobs[i]); jobs[i].ID != w.id || !errors.As(err, &je) || je.State != job.StateCancelled ||
			je.ErrorType != "PARENT_FAILED" || je.Message != w.msg {
			t.Fatalf("job %d waited: %v, want job %d CANCELLED: PARENT_FAILED: %s", jobs[i].ID, err, w.id, w.msg)
		}
	}
}

// followed is a WatchJobs call that has sent every job it follows as it started: what it
// sends next is a change the broker told it of.
type followed struct {
	t      *testing.T
	stream jobwirev1.ProducerService_WatchJobsClient
	last   map[int64]*jobwirev1.Job
}

// follow opens WatchJobs on ids through b and reads until each job was sent once.
func follow(t *testing.T, b *brokertest.Bundle, ids ...int64) *followed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.WaitTimeout)
	t.Cleanup(cancel)
	stream, err := b.Producer.WatchJobs(ctx, &jobwirev1.WatchJobsRequest{Ids: ids})
	if err != nil {
		t.Fatal(err)
	}
	f := &followed{t: t, stream: stream, last: map[int64]*jobwirev1.Job{}}
	f.until(func() bool { return len(f.last) == len(ids) })
	return f
}

// until reads what the watch sends until done holds, failing t if the watch ends first (or
// after brokertest.WaitTimeout).
func (f *followed) until(done func() bool) {
	f.t.Helper()
	for !done() {
		resp, err := f.stream.Recv()
		if err != nil {
			f.t.Fatalf("watch: %v (last sent: %v)", err, f.last)
		}
		for _, j := range resp.GetJobs() {
			f.last[j.GetId()] = j
		}
	}
}

// finals reads until every followed job was sent final, and returns them by id.
func (f *followed) finals() map[int64]*jobwirev1.Job {
	f.t.Helper()
	f.until(func() bool {
		for _, j := range f.last {
			if !final(j) {
				return false
			}
		}
		return true
	})
	return f.last
}

// checkCancelledStream fails t unless the watch sent both dependents CANCELLED by their parent.
func (c chain) checkCancelledStream(t *testing.T, got map[int64]*jobwirev1.Job) {
	t.Helper()
	for id, msg := range map[int64]string{c.child: "parent job " + itoa(c.parent) + " ended DEAD",
		c.grandchild: "parent job " + itoa(c.child) + " ended CANCELLED"} {
		if j := got[id]; j.GetState() != stateCancelled || j.GetLastErrorType() != "PARENT_FAILED" || j.GetLastErrorMessage() != msg {
			t.Fatalf("watched job %d: %v, want CANCELLED: %s", id, j, msg)
		}
	}
}

// revivedTold requeues the chain's dead parent through at and checks that w, a watch (of
// any broker) of the chain's dependents, is told of both: the requeue brings them back
// WAITING. w must have been opened after they were cancelled.
func (c chain) revivedTold(t *testing.T, at *brokertest.Bundle, w *broker.JobWatch) {
	t.Helper()
	if _, err := at.Admin.RequeueDeadJobs(context.Background(), &jobwirev1.RequeueDeadJobsRequest{
		Selection: &jobwirev1.BulkSelection{Ids: []int64{c.parent}}}); err != nil {
		t.Fatal(err)
	}
	var told []int64
	for len(told) < 2 {
		select {
		case <-w.C():
		case <-time.After(brokertest.WaitTimeout):
			t.Fatalf("the watch was told of %v, want the revived %d and %d", told, c.child, c.grandchild)
		}
		read, known := w.Changed()
		if len(known) != 0 {
			t.Fatalf("the watch was handed %v, want jobs to read", known)
		}
		told = slices.Compact(slices.Sorted(slices.Values(append(told, read...))))
	}
	if !slices.Equal(told, []int64{c.child, c.grandchild}) {
		t.Fatalf("the watch was told of %v, want %d and %d", told, c.child, c.grandchild)
	}
	if s := getJob(t, at, c.grandchild).GetState(); s != stateWaiting {
		t.Fatalf("the revived grandchild is %s, want WAITING", s)
	}
}

// quietWatch opens a watch of ids on b's broker and takes what it was told so far: it is then
// told only of what happens next.
func quietWatch(t *testing.T, b *brokertest.Bundle, ids ...int64) *broker.JobWatch {
	t.Helper()
	w := b.Broker.WatchJobs(ids, broker.WatchOptions{})
	t.Cleanup(w.Close)
	w.Changed()
	select {
	case <-w.C():
	default:
	}
	return w
}

// A wait on a chain of dependents returns as the write that stores their parent's FATAL
// failure commits, each CANCELLED naming its parent, on either store; so does a watch. A
// broker whose store is wrapped (its waits on the database bounded) hears the same. Requeueing
// the dead parent revives both, and their watches are told.
func TestWaitOnDependentsReturnsAsTheirParentFails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts brokertest.Options
	}{
		{"sqlite", brokertest.Options{}},
		{"sqlite, database silence bounded", brokertest.Options{DatabaseSilence: time.Hour}},
		{"postgres", brokertest.Options{Postgres: true}},
		// A broker of a cluster ignores the events it sent itself: its store tells it.
		{"postgres cluster, database silence bounded", brokertest.Options{Cluster: true, ClusterPoll: noPoll, DatabaseSilence: time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := brokertest.New(t, tc.opts)
			c := newChain(t, b)
			stream := follow(t, b, c.child, c.grandchild)
			done := waitAsync(client.New(b.Conn), c.child, c.grandchild)
			brokertest.WaitFor(t, "the waits", func() bool { return b.Broker.Watched() == 2 })
			c.failParent(t, b.Connect(brokertest.Hello("w", 1, "parent")))
			c.checkCancelled(t, received(t, done))
			c.checkCancelledStream(t, stream.finals())

			c.revivedTold(t, b, quietWatch(t, b, c.child, c.grandchild))
		})
	}
}

// Across brokers of a PostgreSQL cluster: a wait on one broker returns as the other stores the
// parent's failure (the store's settling tells every broker which jobs it cancelled), and a
// requeue on the other revives them for the watches of the first. The worker is connected to
// the other broker first, idle while the jobs are enqueued and watched through the first: the
// parent's notification may have its broker lease while a dependent's insert holds the parent,
// and that insert's own notification has it look again (see
// TestIdleWorkerOnAnotherBrokerIsOfferedAParentAsItsDependentsAreEnqueued).
func TestWaitOnDependentsReturnsAsTheirParentFailsOnAnotherBroker(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	w := b.Connect(brokertest.Hello("w", 1, "parent"))
	c := newChain(t, a)
	stream := follow(t, a, c.child, c.grandchild)
	done := waitAsync(client.New(a.Conn), c.child, c.grandchild)
	brokertest.WaitFor(t, "the waits", func() bool { return a.Broker.Watched() == 2 })
	c.failParent(t, w)
	c.checkCancelled(t, received(t, done))
	c.checkCancelledStream(t, stream.finals())
	if b.Broker.Watched() != 0 {
		t.Fatalf("%d jobs watched on the broker that wrote", b.Broker.Watched())
	}

	c.revivedTold(t, b, quietWatch(t, a, c.child, c.grandchild))
}

// A parent's failure that cancels more dependents than one notification names tells the other
// brokers of every one: a wait there on the last returns at once too.
func TestManyDependentsCancelledOnOneBrokerReachWaitsOnAnother(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	w := b.Connect(brokertest.Hello("w", 1, "parent"))
	parent := enqueue(t, a, &jobwirev1.JobSpec{Type: "parent"})
	specs := make([]*jobwirev1.JobSpec, 2*store.JobEventIDs+1)
	for i := range specs {
		specs[i] = &jobwirev1.JobSpec{Type: "child", DependsOn: []int64{parent}}
	}
	res, err := a.Producer.EnqueueBatch(context.Background(), &jobwirev1.EnqueueBatchRequest{Jobs: specs})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, len(specs)) // all of them: each event names 300, and all must be read
	for i, j := range res.GetJobs() {
		ids[i] = j.GetId()
	}
	done := waitAsync(client.New(a.Conn), ids...)
	brokertest.WaitFor(t, "the wait", func() bool { return a.Broker.Watched() == len(ids) })
	runOne(t, w, parent, "ValueError")
	for _, j := range received(t, done) {
		if j.State != job.StateCancelled || j.LastErrorMessage != "parent job "+itoa(parent)+" ended DEAD" {
			t.Fatalf("job %d waited: %s %q", j.ID, j.State, j.LastErrorMessage)
		}
	}
}

// Cancelling a graph cancels its first job, whose dependents the store cancels with it: their
// waits return at once, each CANCELLED naming its parent.
func TestCancelGraphReachesTheWaitsOfItsJobs(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, pg bool) {
		b := brokertest.New(t, brokertest.Options{Postgres: pg})
		res, err := b.Producer.EnqueueGraph(context.Background(), &jobwirev1.EnqueueGraphRequest{Nodes: []*jobwirev1.GraphNode{
			graphNode("root", "g"), graphNode("mid", "g", "root"), graphNode("leaf", "g", "mid")}})
		if err != nil {
			t.Fatal(err)
		}
		root, mid, leaf := res.GetJobs()[0].GetId(), res.GetJobs()[1].GetId(), res.GetJobs()[2].GetId()
		done := waitAsync(client.New(b.Conn), mid, leaf)
		brokertest.WaitFor(t, "the wait", func() bool { return b.Broker.Watched() == 2 })
		cancelled, err := b.Producer.CancelGraph(context.Background(), &jobwirev1.CancelGraphRequest{GraphId: res.GetGraphId()})
		if err != nil || cancelled.GetCancelled() != 3 {
			t.Fatalf("cancel graph = %v, %v; want 3 cancelled", cancelled, err)
		}
		jobs := received(t, done)
		for i, parent := range []int64{root, mid} {
			want := "parent job " + itoa(parent) + " ended CANCELLED"
			if j := jobs[i]; j.State != job.StateCancelled || j.LastErrorMessage != want {
				t.Fatalf("job %d waited: %s %q, want CANCELLED %q", j.ID, j.State, j.LastErrorMessage, want)
			}
		}
	})
}

// A broker whose waits on its database are bounded (as the jobwire command bounds a broker of
// a cluster) wraps its store; it still hears from the store that a commit made dependents
// ready, and offers one to an idle worker at once, with no clock moved.
func TestDependentReleasedIsOfferedAtOnceWithDatabaseSilenceBounded(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{DatabaseSilence: time.Hour})
	parent := enqueue(t, b, &jobwirev1.JobSpec{Type: "parent"})
	child := enqueue(t, b, &jobwirev1.JobSpec{Type: "child", DependsOn: []int64{parent}})
	idle := b.Connect(brokertest.Hello("idle", 1, "child"))
	runOne(t, b.Connect(brokertest.Hello("w", 1, "parent")), parent, "")
	runOne(t, idle, child, "")
}
