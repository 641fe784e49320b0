package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"

	"google.golang.org/grpc/codes"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job/jobkey"
)

func runConcurrencyList(ctx context.Context, e *env, c *command, args []string) error {
	cf, err := parseCommonOnly(e, c, args)
	if err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.ListConcurrencyRulesResponse, error) {
		return b.admin.ListConcurrencyRules(ctx, &jobwirev1.ListConcurrencyRulesRequest{})
	}, func(resp *jobwirev1.ListConcurrencyRulesResponse) error {
		if len(resp.GetRules()) == 0 {
			fmt.Fprintln(e.stdout, "no concurrency rules")
			return nil
		}
		printConcurrencyTable(e.stdout, "", resp.GetRules())
		return nil
	})
}

// printConcurrencyTable writes one line per rule, each line starting with indent.
func printConcurrencyTable(w io.Writer, indent string, rules []*jobwirev1.ConcurrencyRuleInfo) {
	tw := newTable(w)
	row(tw, indent+"RULE", "TYPE", "QUEUE", "KEY", "MAX RUNNING", "KEYS", "AT LIMIT", "RUNNING", "WAITING")
	for _, r := range rules {
		p := r.GetRule()
		name, key, most := display(p.GetName()), display(p.GetKey()), strconv.Itoa(int(p.GetMaxRunning()))
		if p == nil {
			name, key, most = "(producers' keys)", "-", "per job"
		}
		row(tw, indent+name, anyIfEmpty(p.GetType()), anyIfEmpty(p.GetQueue()), key, most, r.GetKeys(), r.GetKeysAtLimit(),
			r.GetRunning(), r.GetWaiting())
	}
	_ = tw.Flush()
}

func runConcurrencySet(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	var typ, queue, key string
	var most int
	fs.StringVar(&typ, "type", "", "the job type the rule keys (default: any)")
	fs.StringVar(&queue, "queue", "", "the queue the rule keys (default: any)")
	fs.StringVar(&key, "key", "", "where the key comes from: type, queue, metadata.NAME or payload.FIELD (required)")
	fs.IntVar(&most, "max-running", 0, "how many jobs of one key may run at once, at least 1 (required)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos, "rule name"); err != nil {
		return err
	}
	switch {
	case pos[0] == "":
		return usageErrorf("the rule name is empty")
	case !flagGiven(fs, "key"):
		return usageErrorf("--key is required: where each job's key comes from, e.g. --key payload.customer_id")
	}
	if err := checkRange("max-running", most, 1, maxConcurrencyLimit); err != nil {
		return err
	}
	if _, err := jobkey.Parse(key); err != nil {
		return usageErrorf("--key: %v", err)
	}
	rule := &jobwirev1.ConcurrencyRule{Name: pos[0], Type: typ, Queue: queue, Key: key, MaxRunning: int32(most)}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.SetConcurrencyRuleResponse, error) {
		return b.admin.SetConcurrencyRule(ctx, &jobwirev1.SetConcurrencyRuleRequest{Rule: rule})
	}, func(resp *jobwirev1.SetConcurrencyRuleResponse) error {
		r := resp.GetRule()
		fmt.Fprintf(e.stdout, "rule %s: at most %d running jobs of %s %s per key %s\n", display(r.GetName()),
			r.GetMaxRunning(), anyIfEmpty(r.GetType()), "in queue "+anyIfEmpty(r.GetQueue()), display(r.GetKey()))
		return nil
	})
}

func runConcurrencyRemove(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos, "rule name"); err != nil {
		return err
	}
	err = request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.RemoveConcurrencyRuleResponse, error) {
		return b.admin.RemoveConcurrencyRule(ctx, &jobwirev1.RemoveConcurrencyRuleRequest{Name: pos[0]})
	}, func(*jobwirev1.RemoveConcurrencyRuleResponse) error {
		fmt.Fprintf(e.stdout, "rule %s removed; the jobs it held back run without a key\n", display(pos[0]))
		return nil
	})
	if rpcCode(err) == codes.NotFound {
		return fmt.Errorf("concurrency rule %q does not exist (see 'jobwire concurrency list')", pos[0])
	}
	return err
}

// concurrencyFlags are enqueue's --concurrency-key and --concurrency-limit.
type concurrencyFlags struct {
	key   string
	limit int
}

func addConcurrencyFlags(fs *flag.FlagSet) *concurrencyFlags {
	f := &concurrencyFlags{}
	fs.StringVar(&f.key, "concurrency-key", "", "at most --concurrency-limit jobs with this key run at once")
	fs.IntVar(&f.limit, "concurrency-limit", 0, "with --concurrency-key: how many of its jobs may run at once, at least 1")
	return f
}

// apply checks the flags and sets them on spec.
func (f *concurrencyFlags) apply(spec *jobwirev1.JobSpec) error {
	switch {
	case f.key == "" && f.limit != 0:
		return usageErrorf("--concurrency-limit needs --concurrency-key")
	case f.key != "" && (f.limit < 1 || f.limit > maxConcurrencyLimit):
		return usageErrorf("--concurrency-limit must be 1..%d with --concurrency-key, got %d", maxConcurrencyLimit, f.limit)
	}
	spec.ConcurrencyKey, spec.ConcurrencyLimit = f.key, int32(f.limit)
	return nil
}

// printConcurrencyStats is stats' section of the concurrency rules.
func printConcurrencyStats(w io.Writer, rules []*jobwirev1.ConcurrencyRuleInfo) {
	if len(rules) == 0 {
		return
	}
	fmt.Fprintln(w, "\nConcurrency per key:")
	printConcurrencyTable(w, "  ", rules)
}
