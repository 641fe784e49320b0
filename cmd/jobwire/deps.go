package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// dependsOnFlag reads --depends-on: job ids separated by commas, each given once.
type dependsOnFlag struct{ ids []int64 }

func (f *dependsOnFlag) String() string { return "" }

func (f *dependsOnFlag) Set(s string) error {
	for part := range strings.SplitSeq(s, ",") {
		id, err := parseID(strings.TrimSpace(part))
		if err != nil {
			return err
		}
		f.ids = append(f.ids, id)
	}
	return nil
}

// addDepsFlags adds enqueue's flags for parents; apply sets them on spec.
func addDepsFlags(fs *flag.FlagSet) (apply func(spec *jobwirev1.JobSpec) error) {
	deps := &dependsOnFlag{}
	var anyway bool
	fs.Var(deps, "depends-on", "run after these jobs (ids, comma-separated) have all SUCCEEDED")
	fs.BoolVar(&anyway, "run-if-parents-fail", false, "with --depends-on: run once the parents are final, whatever their outcome")
	return func(spec *jobwirev1.JobSpec) error {
		if anyway && len(deps.ids) == 0 {
			return usageErrorf("--run-if-parents-fail needs --depends-on")
		}
		if len(deps.ids) > 0 && spec.GetSchedule() != nil {
			return usageErrorf("a job with --depends-on runs when its parents are done: leave out --delay and --run-at")
		}
		spec.DependsOn, spec.RunIfParentsFail = deps.ids, anyway
		return nil
	}
}

// graphFile is what `jobwire graph enqueue FILE` reads.
type graphFile struct {
	Nodes []graphFileNode `json:"nodes"`
}

type graphFileNode struct {
	Key              string          `json:"key"`
	Type             string          `json:"type"`
	Payload          json.RawMessage `json:"payload,omitempty"`
	Queue            string          `json:"queue,omitempty"`
	Priority         int32           `json:"priority,omitempty"`
	MaxAttempts      int32           `json:"max_attempts,omitempty"`
	IdempotencyKey   string          `json:"idempotency_key,omitempty"`
	DependsOn        []string        `json:"depends_on,omitempty"`
	DependsOnJobs    []int64         `json:"depends_on_jobs,omitempty"`
	RunIfParentsFail bool            `json:"run_if_parents_fail,omitempty"`
}

// readGraph reads a graph file into a request.
func readGraph(path string) (*jobwirev1.EnqueueGraphRequest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, usageErrorf("cannot read the graph file: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var g graphFile
	if err := dec.Decode(&g); err != nil {
		return nil, usageErrorf("the graph file is not a graph: %v (want {\"nodes\": [{\"key\": ..., \"type\": ..., \"depends_on\": [...]}]})", err)
	}
	if len(g.Nodes) == 0 {
		return nil, usageErrorf("the graph file has no nodes")
	}
	req := &jobwirev1.EnqueueGraphRequest{}
	for i, n := range g.Nodes {
		if n.Key == "" || n.Type == "" {
			return nil, usageErrorf("node %d of the graph file needs a key and a type", i)
		}
		spec := &jobwirev1.JobSpec{Type: n.Type, Queue: n.Queue, Priority: n.Priority, MaxAttempts: n.MaxAttempts,
			IdempotencyKey: n.IdempotencyKey, DependsOn: n.DependsOnJobs, RunIfParentsFail: n.RunIfParentsFail}
		if len(n.Payload) > 0 {
			spec.Payload = n.Payload
		}
		req.Nodes = append(req.Nodes, &jobwirev1.GraphNode{Key: n.Key, Job: spec, DependsOn: n.DependsOn})
	}
	return req, nil
}

func runGraphEnqueue(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos, "graph FILE"); err != nil {
		return err
	}
	req, err := readGraph(pos[0])
	if err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.EnqueueGraphResponse, error) {
		return b.producer.EnqueueGraph(ctx, req)
	}, func(resp *jobwirev1.EnqueueGraphResponse) error {
		fmt.Fprintf(e.stdout, "graph %d\n", resp.GetGraphId())
		tw := newTable(e.stdout)
		row(tw, "KEY", "ID", "STATE")
		for i, j := range resp.GetJobs() {
			row(tw, req.GetNodes()[i].GetKey(), j.GetId(), enumName(j.GetState()))
		}
		return tw.Flush()
	})
}

func runGraphGet(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	id, err := parseGraphArg(fs, args)
	if err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.GetGraphResponse, error) {
		return b.producer.GetGraph(ctx, &jobwirev1.GetGraphRequest{GraphId: id})
	}, func(resp *jobwirev1.GetGraphResponse) error {
		tw := newTable(e.stdout)
		row(tw, "ID", "TYPE", "STATE", "PARENTS", "LAST ERROR")
		for _, j := range resp.GetJobs() {
			row(tw, j.GetId(), j.GetType(), enumName(j.GetState()), orDash(parentIDs(j.GetDependencies())),
				orDash(oneLine(lastError(j), 80)))
		}
		return tw.Flush()
	})
}

func runGraphCancel(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	id, err := parseGraphArg(fs, args)
	if err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.CancelGraphResponse, error) {
		return b.producer.CancelGraph(ctx, &jobwirev1.CancelGraphRequest{GraphId: id})
	}, func(resp *jobwirev1.CancelGraphResponse) error {
		fmt.Fprintf(e.stdout, "cancelled %d jobs of graph %d\n", resp.GetCancelled(), id)
		return nil
	})
}

func parseGraphArg(fs *flag.FlagSet, args []string) (int64, error) {
	pos, err := parse(fs, args)
	if err != nil {
		return 0, err
	}
	if err := positionals(pos, "graph ID"); err != nil {
		return 0, err
	}
	return parseID(pos[0])
}

// parentIDs lists a job's parents with their states: "3 SUCCEEDED, 4 RUNNING".
func parentIDs(d *jobwirev1.JobDependencies) string {
	var out []string
	for _, p := range d.GetParents() {
		out = append(out, fmt.Sprintf("%d %s", p.GetId(), enumName(p.GetState())))
	}
	return strings.Join(out, ", ")
}

// printDeps adds a job's parents, dependents and graph to job get's table.
func printDeps(tw io.Writer, d *jobwirev1.JobDependencies) {
	if d == nil {
		return
	}
	if len(d.GetParents()) > 0 {
		row(tw, "Parents", parentIDs(d))
	}
	if len(d.GetDependents()) > 0 {
		ids := make([]string, len(d.GetDependents()))
		for i, id := range d.GetDependents() {
			ids[i] = fmt.Sprint(id)
		}
		row(tw, "Dependents", strings.Join(ids, ", "))
	}
	if d.GetGraphId() != 0 {
		row(tw, "Graph", d.GetGraphId())
	}
	if d.GetRunIfParentsFail() {
		row(tw, "Runs if parents fail", "yes")
	}
}
