package server_test

import (
	"context"
	"testing"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// A worker idle on one broker of a cluster is offered what is enqueued through the other, with
// neither broker's dispatch poll ever running: only the notifications of the writes wake it.
// Each test connects the worker first, so that its broker's rounds race the other's writes.

func TestIdleWorkerOnAnotherBrokerIsOfferedAPlainJob(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	w := b.Connect(brokertest.Hello("w", 1, "parent"))
	runOne(t, w, enqueue(t, a, &jobwirev1.JobSpec{Type: "parent"}), "")
}

// The parent's notification has the worker's broker lease while the other stores its
// dependents, each of which locks the parent (shared) until it commits: a lease that ran then
// skipped the parent, and nothing woke the worker's broker again. The dependents' writes
// publish that the parent is ready.
func TestIdleWorkerOnAnotherBrokerIsOfferedAParentAsItsDependentsAreEnqueued(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	w := b.Connect(brokertest.Hello("w", 1, "parent"))
	runOne(t, w, newChain(t, a).parent, "")
}

// A dependent whose parents have all succeeded is ready as it is stored, which told no other
// broker: neither the dependent's nor its parent's write had the worker's broker look again.
func TestIdleWorkerOnAnotherBrokerIsOfferedADependentOfADoneParent(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	w := b.Connect(brokertest.Hello("w", 1, "parent", "child"))
	parent := enqueue(t, a, &jobwirev1.JobSpec{Type: "parent"})
	runOne(t, w, parent, "")
	a.WaitState(parent, jobwirev1.JobState_JOB_STATE_SUCCEEDED)
	runOne(t, w, enqueue(t, a, &jobwirev1.JobSpec{Type: "child", DependsOn: []int64{parent}}), "")
}

// A graph's root is ready as the graph is stored.
func TestIdleWorkerOnAnotherBrokerIsOfferedTheRootOfAGraph(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	w := b.Connect(brokertest.Hello("w", 1, "g"))
	res, err := a.Producer.EnqueueGraph(context.Background(), &jobwirev1.EnqueueGraphRequest{Nodes: []*jobwirev1.GraphNode{
		graphNode("fetch", "g"), graphNode("report", "g", "fetch"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	runOne(t, w, res.GetJobs()[0].GetId(), "")
}
