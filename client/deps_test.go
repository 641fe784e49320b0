package client_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/job"
)

// The client enqueues with DependsOn and as a graph, reads a job's dependencies and a graph,
// and cancels a graph; refusals match the errors the docs name.
func TestDependenciesRoundTrip(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	c := client.New(b.Conn)
	ctx := context.Background()
	g, err := c.EnqueueGraph(ctx, []client.GraphNode{
		{Key: "merge", Spec: client.JobSpec{Type: "m"}, DependsOn: []string{"a", "b"}},
		{Key: "a", Spec: client.JobSpec{Type: "p"}},
		{Key: "b", Spec: client.JobSpec{Type: "p"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if g.GraphID != g.ByKey["a"] || g.Jobs[0].State != job.StateWaiting {
		t.Fatalf("graph = %+v", g)
	}
	mail, err := c.Enqueue(ctx, "mail", nil, client.DependsOn(g.ByKey["merge"]), client.RunIfParentsFail())
	if err != nil || mail.State != job.StateWaiting {
		t.Fatalf("enqueue with DependsOn: %+v, %v", mail, err)
	}
	d, err := c.Dependencies(ctx, mail.ID)
	if err != nil || len(d.Parents) != 1 || d.Parents[0].ID != g.ByKey["merge"] || !d.RunIfParentsFail || d.ParentsLeft != 1 {
		t.Fatalf("dependencies = %+v, %v", d, err)
	}
	jobs, err := c.GetGraph(ctx, g.GraphID)
	if err != nil || len(jobs) != 3 || len(jobs[2].Deps.Parents) != 2 || jobs[2].Deps.Dependents[0] != mail.ID {
		t.Fatalf("graph jobs = %+v, %v", jobs, err)
	}
	n, err := c.CancelGraph(ctx, g.GraphID)
	if err != nil || n != 3 {
		t.Fatalf("cancel graph: %d, %v; want 3", n, err)
	}
	// The mail job runs anyway: its parent was cancelled, and it was enqueued to run whatever.
	if j, err := c.Get(ctx, mail.ID); err != nil || j.State != job.StatePending {
		t.Fatalf("run-anyway dependent after the graph's cancel: %v, %v", j.State, err)
	}
	if _, err := c.EnqueueGraph(ctx, []client.GraphNode{{Key: "x", DependsOn: []string{"x"}, Spec: client.JobSpec{Type: "t"}}}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("a node that depends on itself: %v, want ErrInvalidArgument", err)
	}
	if _, err := c.Enqueue(ctx, "t", nil, client.DependsOn(987654)); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("an unknown parent: %v, want ErrNotFound", err)
	}
}
