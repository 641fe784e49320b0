package server

import (
	"context"

	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job/jobkey"
)

// maxConcurrencyLimit bounds a key's limit: far above any worker fleet, low enough that a
// typo (a count of jobs for a limit) shows.
const maxConcurrencyLimit = 100000

// validConcurrencyKey checks a spec's own concurrency key: a limit with a key, no limit
// without one.
func validConcurrencyKey(prefix string, s *jobwirev1.JobSpec) error {
	k, n := s.GetConcurrencyKey(), s.GetConcurrencyLimit()
	switch {
	case k == "" && n != 0:
		return invalid(prefix+".concurrency_limit", "is %d but concurrency_key is empty: give both or neither", n)
	case len(k) > maxNameLen:
		return invalid(prefix+".concurrency_key", "must be at most %d bytes, got %d", maxNameLen, len(k))
	case k != "" && (n < 1 || n > maxConcurrencyLimit):
		return invalid(prefix+".concurrency_limit", "must be 1..%d with concurrency_key %q, got %d", maxConcurrencyLimit, k, n)
	}
	return nil
}

// validConcurrencyRule checks a rule as the broker will apply it.
func validConcurrencyRule(r *jobwirev1.ConcurrencyRule) error {
	if r == nil {
		return invalid("rule", "is missing")
	}
	if r.GetName() == "" {
		return invalid("rule.name", "must name the rule")
	}
	if err := optionalName("rule.type", r.GetType()); err != nil {
		return err
	}
	if err := optionalName("rule.queue", r.GetQueue()); err != nil {
		return err
	}
	if _, err := jobkey.Parse(r.GetKey()); err != nil {
		return invalid("rule.key", "%v", err)
	}
	if n := r.GetMaxRunning(); n < 1 || n > maxConcurrencyLimit {
		return invalid("rule.max_running", "must be 1..%d, got %d", maxConcurrencyLimit, n)
	}
	return nil
}

func (a *admin) ListConcurrencyRules(ctx context.Context, _ *jobwirev1.ListConcurrencyRulesRequest) (*jobwirev1.ListConcurrencyRulesResponse, error) {
	infos, err := a.b.ConcurrencyRules(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.ListConcurrencyRulesResponse{Rules: concurrencyToProto(infos)}, nil
}

func (a *admin) SetConcurrencyRule(ctx context.Context, req *jobwirev1.SetConcurrencyRuleRequest) (*jobwirev1.SetConcurrencyRuleResponse, error) {
	r := req.GetRule()
	rule := broker.ConcurrencyRule{Name: r.GetName(), Type: r.GetType(), Queue: r.GetQueue(), Key: r.GetKey(),
		MaxRunning: int(r.GetMaxRunning())}
	if err := a.b.SetConcurrencyRule(ctx, rule); err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.SetConcurrencyRuleResponse{Rule: ruleToProto(rule)}, nil
}

func (a *admin) RemoveConcurrencyRule(ctx context.Context, req *jobwirev1.RemoveConcurrencyRuleRequest) (*jobwirev1.RemoveConcurrencyRuleResponse, error) {
	if err := a.b.RemoveConcurrencyRule(ctx, req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.RemoveConcurrencyRuleResponse{}, nil
}

func ruleToProto(r broker.ConcurrencyRule) *jobwirev1.ConcurrencyRule {
	return &jobwirev1.ConcurrencyRule{Name: r.Name, Type: r.Type, Queue: r.Queue, Key: r.Key, MaxRunning: int32(r.MaxRunning)}
}

func concurrencyToProto(infos []broker.ConcurrencyInfo) []*jobwirev1.ConcurrencyRuleInfo {
	out := make([]*jobwirev1.ConcurrencyRuleInfo, 0, len(infos))
	for _, in := range infos {
		pi := &jobwirev1.ConcurrencyRuleInfo{Keys: int32(in.Keys), KeysAtLimit: int32(in.AtLimit),
			Running: int64(in.Held), Waiting: int64(in.Waiting)}
		if in.Name != "" {
			pi.Rule = ruleToProto(in.ConcurrencyRule)
		}
		out = append(out, pi)
	}
	return out
}
