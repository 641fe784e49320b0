package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/job"
)

// validateDeps checks a spec's parents: positive ids, each once, at most broker.MaxParents,
// and no run time (a dependent runs when its parents are done).
func validateDeps(prefix string, s *jobwirev1.JobSpec) error {
	ids := s.GetDependsOn()
	if len(ids) == 0 {
		if s.GetRunIfParentsFail() {
			return invalid(prefix+".run_if_parents_fail", "is set on a job without depends_on")
		}
		return nil
	}
	if len(ids) > broker.MaxParents {
		return invalid(prefix+".depends_on", "names %d jobs, more than %d", len(ids), broker.MaxParents)
	}
	seen := make(map[int64]bool, len(ids))
	for i, id := range ids {
		if err := validID(fmt.Sprintf("%s.depends_on[%d]", prefix, i), id); err != nil {
			return err
		}
		if seen[id] {
			return invalid(fmt.Sprintf("%s.depends_on[%d]", prefix, i), "names job %d twice", id)
		}
		seen[id] = true
	}
	if s.GetSchedule() != nil {
		return invalid(prefix+".depends_on", "a job with parents runs when they are done: it cannot have run_at or delay")
	}
	return nil
}

// validateGraph checks an EnqueueGraph request's shape; the broker checks its edges.
func (l Limits) validateGraph(r *jobwirev1.EnqueueGraphRequest, now time.Time) error {
	nodes := r.GetNodes()
	if n := len(nodes); n == 0 || n > l.MaxBatch {
		return invalid("nodes", "must hold 1..%d nodes, got %d", l.MaxBatch, n)
	}
	for i, n := range nodes {
		prefix := fmt.Sprintf("nodes[%d]", i)
		if err := validName(prefix+".key", n.GetKey()); err != nil {
			return err
		}
		if err := l.validateSpec(prefix+".job", n.GetJob(), now); err != nil {
			return err
		}
		for j, k := range n.GetDependsOn() {
			if err := validName(fmt.Sprintf("%s.depends_on[%d]", prefix, j), k); err != nil {
				return err
			}
		}
		if len(n.GetDependsOn()) > 0 && n.GetJob().GetSchedule() != nil {
			return invalid(prefix+".depends_on", "a job with parents runs when they are done: it cannot have run_at or delay")
		}
	}
	return nil
}

// depsSpecFromProto is the parents a spec names; nil for none.
func depsSpecFromProto(s *jobwirev1.JobSpec) *broker.DepsSpec {
	if len(s.GetDependsOn()) == 0 && !s.GetRunIfParentsFail() {
		return nil
	}
	return &broker.DepsSpec{Parents: s.GetDependsOn(), RunAnyway: s.GetRunIfParentsFail()}
}

func (p *producer) EnqueueGraph(ctx context.Context, req *jobwirev1.EnqueueGraphRequest) (*jobwirev1.EnqueueGraphResponse, error) {
	nodes := make([]broker.GraphNode, len(req.GetNodes()))
	for i, n := range req.GetNodes() {
		nodes[i] = broker.GraphNode{Key: n.GetKey(), Spec: jobSpecFromProto(n.GetJob()), DependsOn: n.GetDependsOn()}
	}
	graph, res, err := p.b.EnqueueGraph(ctx, nodes)
	if err != nil {
		return nil, depsStatus(err)
	}
	out := &jobwirev1.EnqueueGraphResponse{GraphId: graph, Jobs: make([]*jobwirev1.EnqueuedJob, len(res))}
	for i, r := range res {
		out.Jobs[i] = enqueuedToProto(r)
	}
	return out, nil
}

func (p *producer) GetGraph(ctx context.Context, req *jobwirev1.GetGraphRequest) (*jobwirev1.GetGraphResponse, error) {
	jobs, deps, err := p.b.Graph(ctx, req.GetGraphId())
	if err != nil {
		return nil, toStatus(err)
	}
	out := &jobwirev1.GetGraphResponse{Jobs: make([]*jobwirev1.Job, len(jobs))}
	for i, j := range jobs {
		out.Jobs[i] = jobToProto(j)
		out.Jobs[i].Dependencies = depsToProto(deps[j.ID])
	}
	return out, nil
}

func (p *producer) CancelGraph(ctx context.Context, req *jobwirev1.CancelGraphRequest) (*jobwirev1.CancelGraphResponse, error) {
	n, err := p.b.CancelGraph(ctx, req.GetGraphId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.CancelGraphResponse{Cancelled: int32(n)}, nil
}

// depsStatus is toStatus with the errors of dependencies.
func depsStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, broker.ErrBadGraph):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, broker.ErrParentFailed):
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	return toStatus(err)
}

// withDeps adds what GetJob shows of a job's dependencies: its parents and dependents, and for
// a WAITING job, why it waits.
func (p *producer) withDeps(ctx context.Context, j *job.Job, out *jobwirev1.GetJobResponse) error {
	deps, err := p.b.Deps(ctx, j.ID)
	if err != nil || deps == nil {
		return err
	}
	out.Job.Dependencies = depsToProto(deps)
	if j.State == job.StateWaiting {
		out.Waiting = &jobwirev1.JobWaiting{Reason: jobwirev1.WaitReason_WAIT_REASON_PARENTS, Detail: waitingDetail(deps)}
	}
	return nil
}

// waitingDetail names the parents a WAITING job still waits for.
func waitingDetail(d *broker.JobDeps) string {
	var open []string
	for _, p := range d.Parents {
		if !p.State.Final() {
			open = append(open, fmt.Sprintf("%d (%s)", p.ID, p.State))
		}
	}
	if len(open) == 0 {
		return "its parents are done; it is being released"
	}
	return "waits for parent jobs " + strings.Join(open, ", ")
}

func depsToProto(d *broker.JobDeps) *jobwirev1.JobDependencies {
	if d == nil {
		return nil
	}
	out := &jobwirev1.JobDependencies{Dependents: d.Dependents, GraphId: d.Graph, RunIfParentsFail: d.RunAnyway,
		ParentsLeft: int32(d.ParentsLeft), CancelledBy: d.CancelledBy}
	for _, p := range d.Parents {
		out.Parents = append(out.Parents, &jobwirev1.JobParent{Id: p.ID, Type: p.Type, State: stateToProto(p.State)})
	}
	return out
}

func parentResultsToProto(ps []broker.ParentInfo) []*jobwirev1.ParentResult {
	if len(ps) == 0 {
		return nil
	}
	out := make([]*jobwirev1.ParentResult, len(ps))
	for i, p := range ps {
		out[i] = &jobwirev1.ParentResult{JobId: p.ID, Type: p.Type, Result: p.Result, State: stateToProto(p.State)}
	}
	return out
}

// authorizeGraph checks a scoped producer's graph: every node within its scope.
func authorizeGraph(p auth.Principal, r *jobwirev1.EnqueueGraphRequest) error {
	for i, n := range r.GetNodes() {
		if err := checkJobScope(p, fmt.Sprintf("nodes[%d].job", i), n.GetJob().GetQueue(), n.GetJob().GetType()); err != nil {
			return err
		}
	}
	return nil
}

// checkGraphScope lets a scoped producer read or cancel a graph only when every job of it is
// within its scope.
func (s *Server) checkGraphScope(ctx context.Context, p auth.Principal, graph int64) error {
	jobs, _, err := s.b.Graph(ctx, graph)
	if err != nil {
		return nil // the call itself answers NOT_FOUND
	}
	for _, j := range jobs {
		if err := checkJobScope(p, "graph_id", j.Queue, j.Type); err != nil {
			return err
		}
	}
	return nil
}
