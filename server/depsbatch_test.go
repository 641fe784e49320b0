package server_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// onBothBrokers runs test on a broker over SQLite and one over PostgreSQL (skipped without a
// test server, outside CI).
func onBothBrokers(t *testing.T, test func(t *testing.T, b *brokertest.Bundle)) {
	t.Helper()
	onBothStores(t, func(t *testing.T, pg bool) { test(t, brokertest.New(t, brokertest.Options{Postgres: pg})) })
}

// openBatch creates an open batch with both callbacks ("report" on success, "done" on
// completion).
func openBatch(t *testing.T, b *brokertest.Bundle) int64 {
	t.Helper()
	res, err := b.Producer.CreateBatch(context.Background(), &jobwirev1.CreateBatchRequest{Batch: &jobwirev1.BatchOptions{
		OnSuccess: &jobwirev1.JobSpec{Type: "report"}, OnComplete: &jobwirev1.JobSpec{Type: "done"}}})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetBatch().GetId()
}

func closeBatch(t *testing.T, b *brokertest.Bundle, id int64) *jobwirev1.Batch {
	t.Helper()
	res, err := b.Producer.CloseBatch(context.Background(), &jobwirev1.CloseBatchRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetBatch()
}

// work ends n assignments of w, each a success unless its job is in fail (a fatal failure),
// and returns the ids it ran.
func work(t *testing.T, w *brokertest.RawWorker, n int, fail ...int64) []int64 {
	t.Helper()
	var ran []int64
	for range n {
		a := w.Assignment()
		w.Started(a)
		if slices.Contains(fail, a.GetJob().GetId()) {
			ack(t, w.Fail(a, brokertest.Fatal("ValueError")))
		} else {
			ack(t, w.Succeed(a))
		}
		ran = append(ran, a.GetJob().GetId())
	}
	return ran
}

// callback takes w's next assignment, which must be the batch's callback of type typ, and
// ends it; then w must get nothing more.
func callback(t *testing.T, w *brokertest.RawWorker, typ string) map[string]string {
	t.Helper()
	a := w.Assignment()
	if a.GetJob().GetType() != typ {
		t.Fatalf("assigned %s job %d, want the %s callback", a.GetJob().GetType(), a.GetJob().GetId(), typ)
	}
	w.Started(a)
	ack(t, w.Succeed(a))
	return a.GetJob().GetMetadata()
}

func idList(ns ...int64) string {
	slices.Sort(ns)
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.FormatInt(n, 10)
	}
	return strings.Join(s, ",")
}

// Dependents in a batch are counted however they end: succeeded, dead, and cancelled because
// a parent (in the batch or not) died, down a chain of dependents. The last of them to end is
// cancelled by its parent's failure, which completes the batch in that transaction: the
// completion callback is assigned once, with every count and failed job, and the success
// callback never.
func TestBatchCountsItsDependentsHoweverTheyEnd(t *testing.T) {
	t.Parallel()
	onBothBrokers(t, func(t *testing.T, b *brokertest.Bundle) {
		ctx := context.Background()
		doomed := enqueue(t, b, &jobwirev1.JobSpec{Type: "doomed"})
		parent := enqueue(t, b, &jobwirev1.JobSpec{Type: "parent"})
		batch := openBatch(t, b)
		res, err := b.Producer.EnqueueBatch(ctx, &jobwirev1.EnqueueBatchRequest{Jobs: []*jobwirev1.JobSpec{
			{Type: "child", BatchId: batch},
			{Type: "child", BatchId: batch, DependsOn: []int64{doomed}},
			{Type: "child", BatchId: batch, DependsOn: []int64{parent}}}})
		if err != nil {
			t.Fatal(err)
		}
		cancelled, released := res.GetJobs()[1].GetId(), res.GetJobs()[2].GetId()
		chained := enqueue(t, b, &jobwirev1.JobSpec{Type: "child", BatchId: batch, DependsOn: []int64{cancelled}})
		graph, err := b.Producer.EnqueueGraph(ctx, &jobwirev1.EnqueueGraphRequest{Nodes: []*jobwirev1.GraphNode{
			{Key: "x", Job: &jobwirev1.JobSpec{Type: "child", BatchId: batch, MaxAttempts: 1}},
			{Key: "y", Job: &jobwirev1.JobSpec{Type: "child", BatchId: batch}, DependsOn: []string{"x"}}}})
		if err != nil {
			t.Fatal(err)
		}
		dies, follows := graph.GetJobs()[0].GetId(), graph.GetJobs()[1].GetId()
		if got := closeBatch(t, b, batch); got.GetTotal() != 6 || got.GetState() != jobwirev1.BatchState_BATCH_STATE_CLOSED {
			t.Fatalf("closed batch %v, want 6 jobs, not complete", got)
		}

		w := b.Connect(brokertest.Hello("w", 1, "parent", "child"))
		ran := work(t, w, 4, dies) // parent, alone, released, dies
		if !slices.Contains(ran, released) || !slices.Contains(ran, dies) {
			t.Fatalf("ran %v", ran)
		}
		if got := getBatch(t, b, batch); got.GetSucceeded() != 2 || got.GetDead() != 1 || got.GetCancelled() != 1 ||
			got.GetState() != jobwirev1.BatchState_BATCH_STATE_CLOSED {
			t.Fatalf("before the last parent: %v, want 2 succeeded, 1 dead, 1 cancelled", got)
		}

		last := b.Connect(brokertest.Hello("last", 1, "doomed", "report", "done"))
		a := last.Assignment()
		if a.GetJob().GetId() != doomed {
			t.Fatalf("assigned %d, want %d", a.GetJob().GetId(), doomed)
		}
		last.Started(a)
		last.SendResult(brokertest.Ref(a), brokertest.Fatal("ValueError"))
		last.SendResult(brokertest.Ref(a), brokertest.Fatal("ValueError")) // a repeat counts nothing more
		ack(t, last.Next())
		ack(t, last.Next())
		meta := callback(t, last, "done")
		want := map[string]string{"jobwire.batch": itoa(batch), "jobwire.batch.total": "6",
			"jobwire.batch.succeeded": "2", "jobwire.batch.dead": "1", "jobwire.batch.cancelled": "3",
			"jobwire.batch.failed": idList(cancelled, chained, dies, follows)}
		for k, v := range want {
			if meta[k] != v {
				t.Errorf("callback's %s = %q, want %q", k, meta[k], v)
			}
		}
		if m, ok := last.Poll(); ok {
			t.Fatalf("after the completion callback: %v", m)
		}
		got := getBatch(t, b, batch)
		if got.GetState() != jobwirev1.BatchState_BATCH_STATE_COMPLETE || got.GetSuccessJobId() != 0 ||
			got.GetCancelled() != 3 || got.GetSucceeded() != 2 || got.GetDead() != 1 {
			t.Fatalf("batch %v", got)
		}
		if j := getJob(t, b, chained); j.GetState() != stateCancelled || j.GetLastErrorMessage() != "parent job "+itoa(cancelled)+" ended CANCELLED" {
			t.Fatalf("chained dependent %s %q", j.GetState(), j.GetLastErrorMessage())
		}
	})
}

// A batch made in one call may hold dependents: when they all succeed both callbacks run once.
// A parent cancelled by the operator cancels its dependent in another batch, which that
// cancel's transaction counts and completes.
func TestBatchOfDependentsMadeInOneCall(t *testing.T) {
	t.Parallel()
	onBothBrokers(t, func(t *testing.T, b *brokertest.Bundle) {
		ctx := context.Background()
		parent := enqueue(t, b, &jobwirev1.JobSpec{Type: "parent"})
		res, err := b.Producer.EnqueueBatch(ctx, &jobwirev1.EnqueueBatchRequest{
			Batch: &jobwirev1.BatchOptions{OnSuccess: &jobwirev1.JobSpec{Type: "report"}, OnComplete: &jobwirev1.JobSpec{Type: "done"}},
			Jobs:  []*jobwirev1.JobSpec{{Type: "child", DependsOn: []int64{parent}}, {Type: "child"}}})
		if err != nil {
			t.Fatal(err)
		}
		if res.GetJobs()[0].GetState() != stateWaiting || res.GetJobs()[1].GetState() != statePending {
			t.Fatalf("enqueued %v", res.GetJobs())
		}
		batch := res.GetBatchId()
		if got := getBatch(t, b, batch); got.GetTotal() != 2 || got.GetState() != jobwirev1.BatchState_BATCH_STATE_CLOSED {
			t.Fatalf("batch %v", got)
		}
		w := b.Connect(brokertest.Hello("w", 1, "parent", "child", "report", "done"))
		work(t, w, 3)
		seen := map[string]map[string]string{}
		for range 2 {
			a := w.Assignment()
			w.Started(a)
			ack(t, w.Succeed(a))
			seen[a.GetJob().GetType()] = a.GetJob().GetMetadata()
		}
		if seen["report"]["jobwire.batch.succeeded"] != "2" || seen["done"]["jobwire.batch.total"] != "2" {
			t.Fatalf("callbacks %v", seen)
		}

		// A parent cancelled while its dependent waits in a closed batch.
		waiting := enqueue(t, b, &jobwirev1.JobSpec{Type: "later"})
		other, err := b.Producer.EnqueueBatch(ctx, &jobwirev1.EnqueueBatchRequest{
			Batch: &jobwirev1.BatchOptions{OnComplete: &jobwirev1.JobSpec{Type: "done"}},
			Jobs:  []*jobwirev1.JobSpec{{Type: "child", DependsOn: []int64{waiting}}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Producer.CancelJob(ctx, &jobwirev1.CancelJobRequest{Id: waiting}); err != nil {
			t.Fatal(err)
		}
		meta := callback(t, w, "done")
		if meta["jobwire.batch.cancelled"] != "1" || meta["jobwire.batch.failed"] != itoa(other.GetJobs()[0].GetId()) {
			t.Fatalf("callback metadata %v", meta)
		}
		if m, ok := w.Poll(); ok {
			t.Fatalf("after the callbacks: %v", m)
		}
	})
}

// A dependent is refused by a batch as any job is: a closed batch fails the whole call
// (FAILED_PRECONDITION), a missing one NOT_FOUND, and nothing of it is stored.
func TestDependentsIntoABatchThatCannotTakeThem(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	parent := b.Enqueue(spec("t"))
	closed := openBatch(t, b)
	closeBatch(t, b, closed)
	tests := []struct {
		name string
		code codes.Code
		call func() error
	}{
		{"enqueue into a closed batch", codes.FailedPrecondition, func() error {
			_, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "t",
				DependsOn: []int64{parent}, BatchId: closed}})
			return err
		}},
		{"a graph's node into a missing batch", codes.NotFound, func() error {
			_, err := b.Producer.EnqueueGraph(ctx, &jobwirev1.EnqueueGraphRequest{Nodes: []*jobwirev1.GraphNode{
				{Key: "a", Job: &jobwirev1.JobSpec{Type: "t"}},
				{Key: "b", Job: &jobwirev1.JobSpec{Type: "t", BatchId: closed + 100}, DependsOn: []string{"a"}}}})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); status.Code(err) != tt.code {
				t.Fatalf("got %v, want %s", err, tt.code)
			}
		})
	}
	if d := getJob(t, b, parent).GetDependencies(); len(d.GetDependents()) != 0 {
		t.Fatalf("a refused call stored dependents: %v", d)
	}
	if got := getBatch(t, b, closed); got.GetTotal() != 0 {
		t.Fatalf("closed batch %v", got)
	}
}

func requeue(t *testing.T, b *brokertest.Bundle, ids ...int64) {
	t.Helper()
	res, err := b.Admin.RequeueDeadJobs(context.Background(), &jobwirev1.RequeueDeadJobsRequest{
		Selection: &jobwirev1.BulkSelection{Ids: ids}})
	if err != nil || res.GetAffected() != int32(len(ids)) {
		t.Fatalf("requeue %v: %v, %v", ids, res, err)
	}
}

// A dead job of a batch requeued from the dead-letter queue leaves its batch's dead count and
// is counted again when it is final: in an open batch, the job that then succeeds makes the
// batch a success, both callbacks running at its close; in a complete batch, the counts follow
// the job while the callbacks, run already, never run again.
func TestRequeuedDeadJobIsCountedAgainInItsBatch(t *testing.T) {
	t.Parallel()
	onBothBrokers(t, func(t *testing.T, b *brokertest.Bundle) {
		ctx := context.Background()
		batch := openBatch(t, b)
		res, err := b.Producer.EnqueueBatch(ctx, &jobwirev1.EnqueueBatchRequest{Jobs: []*jobwirev1.JobSpec{
			{Type: "child", BatchId: batch, MaxAttempts: 1}, {Type: "child", BatchId: batch, MaxAttempts: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		dies := res.GetJobs()[1].GetId()
		w := b.Connect(brokertest.Hello("w", 1, "child", "report", "done"))
		work(t, w, 2, dies)
		if got := getBatch(t, b, batch); got.GetDead() != 1 || got.GetSucceeded() != 1 {
			t.Fatalf("before the requeue: %v", got)
		}
		requeue(t, b, dies)
		if got := getBatch(t, b, batch); got.GetDead() != 0 || got.GetSucceeded() != 1 || len(got.GetFailedJobIds()) != 0 {
			t.Fatalf("after the requeue: %v, want no dead job", got)
		}
		work(t, w, 1)
		closeBatch(t, b, batch)
		seen := map[string]map[string]string{}
		for range 2 {
			a := w.Assignment()
			w.Started(a)
			ack(t, w.Succeed(a))
			seen[a.GetJob().GetType()] = a.GetJob().GetMetadata()
		}
		if seen["report"]["jobwire.batch.succeeded"] != "2" || seen["done"]["jobwire.batch.dead"] != "0" {
			t.Fatalf("callbacks %v", seen)
		}

		// The job dies again, is requeued in the complete batch and succeeds.
		res, err = b.Producer.EnqueueBatch(ctx, &jobwirev1.EnqueueBatchRequest{
			Batch: &jobwirev1.BatchOptions{OnComplete: &jobwirev1.JobSpec{Type: "done"}},
			Jobs:  []*jobwirev1.JobSpec{{Type: "child", MaxAttempts: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		complete, again := res.GetBatchId(), res.GetJobs()[0].GetId()
		work(t, w, 1, again)
		if meta := callback(t, w, "done"); meta["jobwire.batch.dead"] != "1" {
			t.Fatalf("callback %v", meta)
		}
		requeue(t, b, again)
		if got := getBatch(t, b, complete); got.GetDead() != 0 || got.GetState() != jobwirev1.BatchState_BATCH_STATE_COMPLETE {
			t.Fatalf("complete batch after the requeue: %v", got)
		}
		work(t, w, 1)
		if got := getBatch(t, b, complete); got.GetSucceeded() != 1 || got.GetDead() != 0 {
			t.Fatalf("complete batch after the job succeeded: %v", got)
		}
		if m, ok := w.Poll(); ok {
			t.Fatalf("after the requeued job of a complete batch: %v", m)
		}
	})
}

// Requeueing a dead parent brings back the dependents its death cancelled, down the chain,
// WAITING again with their cancel reason cleared, and out of their batch's cancelled count; a
// dependent that another dead parent holds cancelled stays cancelled. The revived run to the
// end, and their batch completes as if the parent had not died.
func TestRequeuedParentRevivesItsDependents(t *testing.T) {
	t.Parallel()
	onBothBrokers(t, func(t *testing.T, b *brokertest.Bundle) {
		done := enqueue(t, b, &jobwirev1.JobSpec{Type: "parent"})
		parent := enqueue(t, b, &jobwirev1.JobSpec{Type: "doomed", MaxAttempts: 1})
		other := enqueue(t, b, &jobwirev1.JobSpec{Type: "doomed", MaxAttempts: 1})
		batch := openBatch(t, b)
		child := enqueue(t, b, &jobwirev1.JobSpec{Type: "child", BatchId: batch, DependsOn: []int64{parent, done}})
		grandchild := enqueue(t, b, &jobwirev1.JobSpec{Type: "child", BatchId: batch, DependsOn: []int64{child}})
		held := enqueue(t, b, &jobwirev1.JobSpec{Type: "child", DependsOn: []int64{parent, other}})

		work(t, b.Connect(brokertest.Hello("wq", 1, "parent")), 1)
		wp := b.Connect(brokertest.Hello("wp", 1, "doomed"))
		work(t, wp, 2, parent, other)
		for _, id := range []int64{child, grandchild, held} {
			b.WaitState(id, stateCancelled)
		}
		if got := getBatch(t, b, batch); got.GetCancelled() != 2 {
			t.Fatalf("batch %v, want 2 cancelled", got)
		}
		if n := cancelledIn(t, b); n != 3 {
			t.Fatalf("the queue counts %d cancelled jobs, want 3", n)
		}

		requeue(t, b, parent)
		for _, id := range []int64{child, grandchild} {
			j := getJob(t, b, id)
			if j.GetState() != stateWaiting || j.GetLastErrorType() != "" || j.GetLastErrorMessage() != "" ||
				j.GetDependencies().GetCancelledBy() != 0 || j.GetDependencies().GetParentsLeft() != 1 {
				t.Fatalf("job %d after its parent's requeue: %s %q %q, deps %v", id, j.GetState(),
					j.GetLastErrorType(), j.GetLastErrorMessage(), j.GetDependencies())
			}
		}
		if j := getJob(t, b, held); j.GetState() != stateCancelled {
			t.Fatalf("dependent of another dead parent: %s, want it still CANCELLED", j.GetState())
		}
		if got := getBatch(t, b, batch); got.GetCancelled() != 0 || len(got.GetFailedJobIds()) != 0 {
			t.Fatalf("batch after the requeue %v, want nothing cancelled", got)
		}

		work(t, wp, 1)
		wc := b.Connect(brokertest.Hello("wc", 1, "child", "report", "done"))
		if ran := work(t, wc, 2); ran[0] != child || ran[1] != grandchild {
			t.Fatalf("ran %v, want %d then %d", ran, child, grandchild)
		}
		closeBatch(t, b, batch)
		seen := map[string]bool{}
		for range 2 {
			a := wc.Assignment()
			wc.Started(a)
			ack(t, wc.Succeed(a))
			seen[a.GetJob().GetType()] = true
		}
		if !seen["report"] || !seen["done"] {
			t.Fatalf("callbacks %v, want both", seen)
		}
		if n := cancelledIn(t, b); n != 1 {
			t.Fatalf("the queue counts %d cancelled jobs, want 1 (the dependent still held)", n)
		}
	})
}

// cancelledIn is how many CANCELLED jobs the default queue counts (its finished totals).
func cancelledIn(t *testing.T, b *brokertest.Bundle) int64 {
	t.Helper()
	res, err := b.Admin.ListQueues(context.Background(), &jobwirev1.ListQueuesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range res.GetQueues() {
		if q.GetName() == "default" {
			return q.GetDepthByState()["CANCELLED"]
		}
	}
	t.Fatalf("no default queue in %v", res)
	return 0
}

// Across brokers on one PostgreSQL database: a parent that dies through one broker cancels its
// dependent, in a batch made through the other, and the completion callback that cancel's
// transaction enqueued reaches a worker of the other broker, once.
func TestClusterParentDeathCompletesABatchOnAnotherBroker(t *testing.T) {
	a, b := twoBrokers(t)
	parent := enqueue(t, a, &jobwirev1.JobSpec{Type: "doomed", MaxAttempts: 1})
	res, err := b.Producer.EnqueueBatch(context.Background(), &jobwirev1.EnqueueBatchRequest{
		Batch: &jobwirev1.BatchOptions{OnComplete: &jobwirev1.JobSpec{Type: "done"}},
		Jobs:  []*jobwirev1.JobSpec{{Type: "child", DependsOn: []int64{parent}}}})
	if err != nil {
		t.Fatal(err)
	}
	wb := b.Connect(brokertest.Hello("wb", 1, "done"))
	work(t, a.Connect(brokertest.Hello("wa", 1, "doomed")), 1, parent)
	meta := callback(t, wb, "done")
	if meta["jobwire.batch.cancelled"] != "1" || meta["jobwire.batch.failed"] != itoa(res.GetJobs()[0].GetId()) {
		t.Fatalf("callback metadata %v", meta)
	}
	if m, ok := wb.Poll(); ok {
		t.Fatalf("after the callback: %v", m)
	}
}
