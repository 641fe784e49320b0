package client

import (
	"context"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// ConcurrencyRule lets at most MaxRunning jobs of one key run at once, across every broker of
// the database, the key taken from each job of Type and/or Queue ("" for any) by Key: "type",
// "queue", "metadata.NAME" or "payload.FIELD[.FIELD...]" (a JSON object payload). The keys it
// gives are "NAME:VALUE"; keys take turns (round-robin), so one key's backlog does not starve
// the others.
type ConcurrencyRule struct {
	Name       string
	Type       string
	Queue      string
	Key        string
	MaxRunning int
}

// ConcurrencyInfo is a rule with how busy its keys are now. Rule.Name is empty for the keys
// producers gave themselves (JobSpec.ConcurrencyKey).
type ConcurrencyInfo struct {
	Rule ConcurrencyRule
	// Keys have jobs leased, running or waiting; KeysAtLimit are those at their limit.
	Keys, KeysAtLimit int
	// Running are leased or running; Waiting are ready and held back or waiting for a worker.
	Running, Waiting int64
}

// ConcurrencyRules lists the limits of running jobs per key, by name, with how busy their
// keys are.
func (c *Client) ConcurrencyRules(ctx context.Context) ([]ConcurrencyInfo, error) {
	resp, err := c.admin.ListConcurrencyRules(ctx, &jobwirev1.ListConcurrencyRulesRequest{})
	if err != nil {
		return nil, wrapErr("ListConcurrencyRules", err)
	}
	return concurrencyFromProto(resp.GetRules()), nil
}

// SetConcurrencyRule adds or replaces a rule. Jobs enqueued from then on take its key; jobs it
// keyed that still wait take its new limit.
func (c *Client) SetConcurrencyRule(ctx context.Context, r ConcurrencyRule) error {
	const op = "SetConcurrencyRule"
	n, err := toInt32(op, "MaxRunning", r.MaxRunning)
	if err != nil {
		return err
	}
	_, err = c.admin.SetConcurrencyRule(ctx, &jobwirev1.SetConcurrencyRuleRequest{Rule: &jobwirev1.ConcurrencyRule{
		Name: r.Name, Type: r.Type, Queue: r.Queue, Key: r.Key, MaxRunning: n}})
	return wrapErr(op, err)
}

// RemoveConcurrencyRule removes a rule: the jobs it keyed that still wait run without a key.
func (c *Client) RemoveConcurrencyRule(ctx context.Context, name string) error {
	_, err := c.admin.RemoveConcurrencyRule(ctx, &jobwirev1.RemoveConcurrencyRuleRequest{Name: name})
	return wrapErr("RemoveConcurrencyRule", err)
}

func concurrencyFromProto(rs []*jobwirev1.ConcurrencyRuleInfo) []ConcurrencyInfo {
	out := make([]ConcurrencyInfo, 0, len(rs))
	for _, r := range rs {
		p := r.GetRule()
		out = append(out, ConcurrencyInfo{
			Rule: ConcurrencyRule{Name: p.GetName(), Type: p.GetType(), Queue: p.GetQueue(), Key: p.GetKey(),
				MaxRunning: int(p.GetMaxRunning())},
			Keys: int(r.GetKeys()), KeysAtLimit: int(r.GetKeysAtLimit()), Running: r.GetRunning(), Waiting: r.GetWaiting()})
	}
	return out
}

// concurrencyToProto sets the concurrency key of s on pb.
func concurrencyToProto(op string, s *JobSpec, pb *jobwirev1.JobSpec) error {
	n, err := toInt32(op, "ConcurrencyLimit", s.ConcurrencyLimit)
	if err != nil {
		return err
	}
	pb.ConcurrencyKey, pb.ConcurrencyLimit = s.ConcurrencyKey, n
	return nil
}
