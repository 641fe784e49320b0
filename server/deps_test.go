package server_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

const (
	stateWaiting   = jobwirev1.JobState_JOB_STATE_WAITING
	statePending   = jobwirev1.JobState_JOB_STATE_PENDING
	stateCancelled = jobwirev1.JobState_JOB_STATE_CANCELLED
	stateSucceeded = jobwirev1.JobState_JOB_STATE_SUCCEEDED
)

// runOne takes w's next assignment, checks it is job id, and ends it: success when fail is
// empty, else a fatal failure of that error type.
func runOne(t *testing.T, w *brokertest.RawWorker, id int64, fail string) *jobwirev1.Assignment {
	t.Helper()
	a := w.Assignment()
	if a.GetJob().GetId() != id {
		t.Fatalf("assigned job %d, want %d", a.GetJob().GetId(), id)
	}
	w.Started(a)
	if fail == "" {
		ack(t, w.Succeed(a))
	} else {
		ack(t, w.Fail(a, brokertest.Fatal(fail)))
	}
	return a
}

func TestDependentRunsAfterEveryParentSucceeded(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	p1 := enqueue(t, b, &jobwirev1.JobSpec{Type: "parent"})
	p2 := enqueue(t, b, &jobwirev1.JobSpec{Type: "parent"})
	res, err := b.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{
		Type: "child", DependsOn: []int64{p2, p1}}})
	if err != nil {
		t.Fatal(err)
	}
	child := res.GetJob().GetId()
	if res.GetJob().GetState() != stateWaiting {
		t.Fatalf("child enqueued %s, want WAITING", res.GetJob().GetState())
	}
	got, err := b.Producer.GetJob(context.Background(), &jobwirev1.GetJobRequest{Id: child})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetWaiting().GetReason() != jobwirev1.WaitReason_WAIT_REASON_PARENTS ||
		!strings.Contains(got.GetWaiting().GetDetail(), "waits for parent jobs") {
		t.Fatalf("waiting = %v", got.GetWaiting())
	}
	if ps := got.GetJob().GetDependencies().GetParents(); len(ps) != 2 || ps[0].GetId() != p2 || ps[1].GetId() != p1 {
		t.Fatalf("parents = %v, want %d then %d", ps, p2, p1)
	}
	w := b.Connect(brokertest.Hello("w", 1, "parent", "child"))
	runOne(t, w, p1, "")
	if j := getJob(t, b, child); j.GetState() != stateWaiting || j.GetDependencies().GetParentsLeft() != 1 {
		t.Fatalf("after one parent: %s with %d parents left", j.GetState(), j.GetDependencies().GetParentsLeft())
	}
	runOne(t, w, p2, "")
	a := runOne(t, w, child, "")
	prs := a.GetParentResults()
	if len(prs) != 2 || prs[0].GetJobId() != p2 || prs[1].GetJobId() != p1 || prs[0].GetState() != stateSucceeded ||
		prs[0].GetType() != "parent" {
		t.Fatalf("parent results = %v", prs)
	}
	if deps := getJob(t, b, p1).GetDependencies(); len(deps.GetDependents()) != 1 || deps.GetDependents()[0] != child {
		t.Fatalf("parent's dependents = %v", deps)
	}
}

func TestDependentIsCancelledWhenAParentDies(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	p := enqueue(t, b, &jobwirev1.JobSpec{Type: "parent"})
	child := enqueue(t, b, &jobwirev1.JobSpec{Type: "child", DependsOn: []int64{p}})
	grandchild := enqueue(t, b, &jobwirev1.JobSpec{Type: "child", DependsOn: []int64{child}})
	anyway := enqueue(t, b, &jobwirev1.JobSpec{Type: "child", DependsOn: []int64{child}, RunIfParentsFail: true})
	w := b.Connect(brokertest.Hello("w", 1, "parent", "child"))
	runOne(t, w, p, "ValueError")
	j := getJob(t, b, child)
	if j.GetState() != stateCancelled || j.GetLastErrorType() != "PARENT_FAILED" ||
		j.GetLastErrorMessage() != "parent job "+itoa(p)+" ended DEAD" || j.GetDependencies().GetCancelledBy() != p {
		t.Fatalf("child = %s %q %q", j.GetState(), j.GetLastErrorType(), j.GetLastErrorMessage())
	}
	if g := getJob(t, b, grandchild); g.GetState() != stateCancelled || g.GetLastErrorMessage() != "parent job "+itoa(child)+" ended CANCELLED" {
		t.Fatalf("grandchild = %s %q", g.GetState(), g.GetLastErrorMessage())
	}
	a := runOne(t, w, anyway, "")
	if prs := a.GetParentResults(); len(prs) != 1 || prs[0].GetState() != stateCancelled {
		t.Fatalf("run-anyway child's parent results = %v", prs)
	}
}

func TestCancellingAWaitingJobCancelsItsDependents(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	p := enqueue(t, b, &jobwirev1.JobSpec{Type: "parent"})
	child := enqueue(t, b, &jobwirev1.JobSpec{Type: "child", DependsOn: []int64{p}})
	grandchild := enqueue(t, b, &jobwirev1.JobSpec{Type: "child", DependsOn: []int64{child}})
	if _, err := b.Producer.CancelJob(context.Background(), &jobwirev1.CancelJobRequest{Id: child}); err != nil {
		t.Fatal(err)
	}
	if g := getJob(t, b, grandchild); g.GetState() != stateCancelled {
		t.Fatalf("grandchild = %s", g.GetState())
	}
	if j := getJob(t, b, p); j.GetState() != statePending {
		t.Fatalf("parent = %s, want it untouched", j.GetState())
	}
}

func TestEnqueueWithDependenciesRefusesWhatCannotRun(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	dead := enqueue(t, b, &jobwirev1.JobSpec{Type: "p"})
	w := b.Connect(brokertest.Hello("w", 1, "p"))
	runOne(t, w, dead, "ValueError")
	done := enqueue(t, b, &jobwirev1.JobSpec{Type: "p"})
	runOne(t, w, done, "")
	for _, c := range []struct {
		name string
		spec *jobwirev1.JobSpec
		code codes.Code
		msg  string
	}{
		{"unknown parent", &jobwirev1.JobSpec{Type: "c", DependsOn: []int64{999999}}, codes.NotFound, "job: depends on job 999999, which does not exist"},
		{"dead parent", &jobwirev1.JobSpec{Type: "c", DependsOn: []int64{done, dead}}, codes.FailedPrecondition, "which is DEAD already"},
		{"twice", &jobwirev1.JobSpec{Type: "c", DependsOn: []int64{done, done}}, codes.InvalidArgument, "job.depends_on[1]: names job"},
		{"not an id", &jobwirev1.JobSpec{Type: "c", DependsOn: []int64{0}}, codes.InvalidArgument, "job.depends_on[0]"},
		{"delayed", &jobwirev1.JobSpec{Type: "c", DependsOn: []int64{done}, Schedule: &jobwirev1.JobSpec_Delay{Delay: durationpb.New(time.Minute)}},
			codes.InvalidArgument, "cannot have run_at or delay"},
		{"anyway alone", &jobwirev1.JobSpec{Type: "c", RunIfParentsFail: true}, codes.InvalidArgument, "run_if_parents_fail"},
	} {
		_, err := b.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{Job: c.spec})
		if status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.msg) {
			t.Errorf("%s: %v, want %s containing %q", c.name, err, c.code, c.msg)
		}
	}
	// A parent that is already done decides its edge at once.
	res, err := b.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "p", DependsOn: []int64{done}}})
	if err != nil || res.GetJob().GetState() != statePending {
		t.Fatalf("child of a SUCCEEDED parent: %v, %v; want PENDING", res, err)
	}
	res, err = b.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "p",
		DependsOn: []int64{dead}, RunIfParentsFail: true}})
	if err != nil || res.GetJob().GetState() != statePending {
		t.Fatalf("run-anyway child of a DEAD parent: %v, %v; want PENDING", res, err)
	}
}

func graphNode(key, typ string, parents ...string) *jobwirev1.GraphNode {
	return &jobwirev1.GraphNode{Key: key, Job: &jobwirev1.JobSpec{Type: typ}, DependsOn: parents}
}

func TestEnqueueGraphRunsInDependencyOrder(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	// Given dependents first: the broker orders them.
	res, err := b.Producer.EnqueueGraph(context.Background(), &jobwirev1.EnqueueGraphRequest{Nodes: []*jobwirev1.GraphNode{
		graphNode("report", "g", "left", "right"), graphNode("left", "g", "fetch"), graphNode("right", "g", "fetch"), graphNode("fetch", "g"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int64{}
	for i, k := range []string{"report", "left", "right", "fetch"} {
		ids[k] = res.GetJobs()[i].GetId()
	}
	if res.GetGraphId() != ids["fetch"] || res.GetJobs()[3].GetState() != statePending || res.GetJobs()[0].GetState() != stateWaiting {
		t.Fatalf("graph = %v", res)
	}
	w := b.Connect(brokertest.Hello("w", 1, "g"))
	runOne(t, w, ids["fetch"], "")
	seen := map[int64]bool{}
	for range 2 {
		a := w.Assignment()
		seen[a.GetJob().GetId()] = true
		w.Started(a)
		ack(t, w.Succeed(a))
	}
	if !seen[ids["left"]] || !seen[ids["right"]] {
		t.Fatalf("second level ran %v", seen)
	}
	a := runOne(t, w, ids["report"], "")
	if len(a.GetParentResults()) != 2 {
		t.Fatalf("report's parents = %v", a.GetParentResults())
	}
	g, err := b.Producer.GetGraph(context.Background(), &jobwirev1.GetGraphRequest{GraphId: res.GetGraphId()})
	if err != nil || len(g.GetJobs()) != 4 {
		t.Fatalf("get graph: %v, %v", g, err)
	}
	for _, j := range g.GetJobs() {
		if j.GetState() != stateSucceeded || j.GetDependencies().GetGraphId() != res.GetGraphId() {
			t.Fatalf("graph job %v", j)
		}
	}
}

func TestEnqueueGraphRefusesBadGraphs(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	for _, c := range []struct {
		name  string
		nodes []*jobwirev1.GraphNode
		code  codes.Code
		msg   string
	}{
		{"cycle", []*jobwirev1.GraphNode{graphNode("a", "g"), graphNode("b", "g", "a", "c"), graphNode("c", "g", "b")},
			codes.InvalidArgument, `node "b": is on a cycle of dependencies`},
		{"self", []*jobwirev1.GraphNode{graphNode("a", "g", "a")}, codes.InvalidArgument, `node "a": depends on itself`},
		{"unknown key", []*jobwirev1.GraphNode{graphNode("a", "g", "zz")}, codes.InvalidArgument, `node "a": depends on "zz", which is no node`},
		{"duplicate key", []*jobwirev1.GraphNode{graphNode("a", "g"), graphNode("a", "g")}, codes.InvalidArgument, `node "a": the key is used by two nodes`},
		{"unknown stored parent", []*jobwirev1.GraphNode{graphNode("a", "g"), {Key: "b", Job: &jobwirev1.JobSpec{Type: "g", DependsOn: []int64{424242}}}},
			codes.NotFound, `node "b": depends on job 424242, which does not exist`},
		{"bad key", []*jobwirev1.GraphNode{graphNode("a b", "g")}, codes.InvalidArgument, `nodes[0].key`},
		{"empty", nil, codes.InvalidArgument, "nodes: must hold"},
	} {
		_, err := b.Producer.EnqueueGraph(context.Background(), &jobwirev1.EnqueueGraphRequest{Nodes: c.nodes})
		if status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.msg) {
			t.Errorf("%s: %v, want %s containing %q", c.name, err, c.code, c.msg)
		}
	}
	// Nothing of a refused graph was stored.
	list, err := b.Admin.ListJobs(context.Background(), &jobwirev1.ListJobsRequest{})
	if err != nil || len(list.GetJobs()) != 0 {
		t.Fatalf("jobs after refused graphs: %v, %v", list.GetJobs(), err)
	}
}

func TestCancelGraphCancelsWhatHasNotRun(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	res, err := b.Producer.EnqueueGraph(context.Background(), &jobwirev1.EnqueueGraphRequest{Nodes: []*jobwirev1.GraphNode{
		graphNode("a", "g"), graphNode("b", "g", "a"), graphNode("c", "g", "b"), graphNode("d", "other"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	w := b.Connect(brokertest.Hello("w", 1, "g"))
	runOne(t, w, res.GetJobs()[0].GetId(), "")
	c, err := b.Producer.CancelGraph(context.Background(), &jobwirev1.CancelGraphRequest{GraphId: res.GetGraphId()})
	if err != nil || c.GetCancelled() != 3 {
		t.Fatalf("cancel graph: %v, %v; want 3 cancelled", c, err)
	}
	want := []jobwirev1.JobState{stateSucceeded, stateCancelled, stateCancelled, stateCancelled}
	for i, e := range res.GetJobs() {
		if s := getJob(t, b, e.GetId()).GetState(); s != want[i] {
			t.Errorf("job %d is %s, want %s", i, s, want[i])
		}
	}
	if _, err := b.Producer.CancelGraph(context.Background(), &jobwirev1.CancelGraphRequest{GraphId: 987654}); status.Code(err) != codes.NotFound {
		t.Fatalf("cancel of no graph: %v", err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
