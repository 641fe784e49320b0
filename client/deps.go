package client

import (
	"context"
	"fmt"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job"
)

// Dependencies. A job enqueued with DependsOn waits (job.StateWaiting) until every parent
// SUCCEEDED; a parent that goes DEAD or CANCELLED cancels it, naming the parent, unless it was
// enqueued with RunIfParentsFail. Its handler reads its parents' results (worker.Job.Parents).
// EnqueueGraph stores a whole graph in one transaction, its nodes naming each other by keys.

// DependsOn makes the job run after the jobs ids, each of which must exist.
func DependsOn(ids ...int64) EnqueueOption {
	return enqueueOptionFunc(func(s *JobSpec) { s.DependsOn = append(s.DependsOn, ids...) })
}

// RunIfParentsFail runs the job once every parent is final, whatever their outcome, instead of
// cancelling it when one goes DEAD or CANCELLED.
func RunIfParentsFail() EnqueueOption {
	return enqueueOptionFunc(func(s *JobSpec) { s.RunIfParentsFail = true })
}

// GraphNode is one job of a graph.
type GraphNode struct {
	// Key names the node within the call: 1..255 characters of [A-Za-z0-9_.:-].
	Key  string
	Spec JobSpec
	// DependsOn are the keys of the nodes this one runs after (Spec.DependsOn may name stored
	// jobs too).
	DependsOn []string
}

// GraphResult is what became of an enqueued graph.
type GraphResult struct {
	// GraphID names the graph for GetGraph and CancelGraph: the id of its first job.
	GraphID int64
	// Jobs are in the order of the nodes.
	Jobs []EnqueueResult
	// ByKey maps each node's key to its job id.
	ByKey map[string]int64
}

// EnqueueGraph stores the nodes in one transaction, or none of them. Parents may come before
// or after their dependents: the broker orders them. A cycle or an unknown key fails with
// ErrInvalidArgument naming the node; a stored parent that does not exist with ErrNotFound.
func (c *Client) EnqueueGraph(ctx context.Context, nodes []GraphNode) (*GraphResult, error) {
	const op = "EnqueueGraph"
	req := &jobwirev1.EnqueueGraphRequest{Nodes: make([]*jobwirev1.GraphNode, len(nodes))}
	specs := make([]*jobwirev1.JobSpec, len(nodes))
	for i := range nodes {
		pb, err := specToProto(fmt.Sprintf("%s[%d]", op, i), &nodes[i].Spec)
		if err != nil {
			return nil, err
		}
		specs[i] = pb
		req.Nodes[i] = &jobwirev1.GraphNode{Key: nodes[i].Key, Job: pb, DependsOn: nodes[i].DependsOn}
	}
	ctx, span := c.startSend(ctx, specs)
	resp, err := c.producer.EnqueueGraph(ctx, req)
	endSend(span, nil, err)
	if err != nil {
		return nil, wrapErr(op, err)
	}
	if len(resp.GetJobs()) != len(nodes) {
		return nil, fmt.Errorf("jobwire: %s: broker answered %d results for %d nodes", op, len(resp.GetJobs()), len(nodes))
	}
	out := &GraphResult{GraphID: resp.GetGraphId(), Jobs: make([]EnqueueResult, len(nodes)), ByKey: make(map[string]int64, len(nodes))}
	for i, j := range resp.GetJobs() {
		out.Jobs[i] = enqueuedFromProto(j)
		out.ByKey[nodes[i].Key] = j.GetId()
	}
	return out, nil
}

// Parent is one job another depends on.
type Parent struct {
	ID    int64
	Type  string
	State job.State
}

// Dependencies is where a job stands among the jobs it depends on and that depend on it.
type Dependencies struct {
	Parents    []Parent // in the order the producer named them
	Dependents []int64
	// GraphID is the graph the job was enqueued in; 0 for none.
	GraphID          int64
	RunIfParentsFail bool
	// ParentsLeft counts the parents whose outcome has not reached the job yet.
	ParentsLeft int
	// CancelledBy is the parent whose failure cancelled the job; 0 for none.
	CancelledBy int64
}

// GraphJob is one job of a graph with its dependencies.
type GraphJob struct {
	Job  *job.Job
	Deps *Dependencies
}

func depsFromProto(d *jobwirev1.JobDependencies) *Dependencies {
	if d == nil {
		return nil
	}
	out := &Dependencies{Dependents: d.GetDependents(), GraphID: d.GetGraphId(), RunIfParentsFail: d.GetRunIfParentsFail(),
		ParentsLeft: int(d.GetParentsLeft()), CancelledBy: d.GetCancelledBy()}
	for _, p := range d.GetParents() {
		out.Parents = append(out.Parents, Parent{ID: p.GetId(), Type: p.GetType(), State: job.State(p.GetState())})
	}
	return out
}

// Dependencies reads a job's parents, dependents and graph; nil for a job with none.
func (c *Client) Dependencies(ctx context.Context, id int64) (*Dependencies, error) {
	resp, err := c.producer.GetJob(ctx, &jobwirev1.GetJobRequest{Id: id})
	if err != nil {
		return nil, wrapErr("Dependencies", err)
	}
	return depsFromProto(resp.GetJob().GetDependencies()), nil
}

// GetGraph reads the jobs of a graph, without payloads, in the order they were stored.
func (c *Client) GetGraph(ctx context.Context, graphID int64) ([]GraphJob, error) {
	resp, err := c.producer.GetGraph(ctx, &jobwirev1.GetGraphRequest{GraphId: graphID})
	if err != nil {
		return nil, wrapErr("GetGraph", err)
	}
	out := make([]GraphJob, len(resp.GetJobs()))
	for i, j := range resp.GetJobs() {
		out[i] = GraphJob{Job: jobFromProto(j), Deps: depsFromProto(j.GetDependencies())}
	}
	return out, nil
}

// CancelGraph cancels every job of a graph that has not finished (a running one's worker is
// told to stop) and returns how many it cancelled.
func (c *Client) CancelGraph(ctx context.Context, graphID int64) (int, error) {
	resp, err := c.producer.CancelGraph(ctx, &jobwirev1.CancelGraphRequest{GraphId: graphID})
	if err != nil {
		return 0, wrapErr("CancelGraph", err)
	}
	return int(resp.GetCancelled()), nil
}
