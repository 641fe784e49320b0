package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

func runRateLimitsList(ctx context.Context, e *env, c *command, args []string) error {
	cf, err := parseCommonOnly(e, c, args)
	if err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.ListRateLimitsResponse, error) {
		return b.admin.ListRateLimits(ctx, &jobwirev1.ListRateLimitsRequest{})
	}, func(resp *jobwirev1.ListRateLimitsResponse) error {
		if len(resp.GetLimits()) == 0 {
			fmt.Fprintln(e.stdout, "no rate limits")
			return nil
		}
		printRateLimitTable(e.stdout, "", resp.GetLimits())
		return nil
	})
}

// printRateLimitTable writes one line per limit, each line starting with indent.
func printRateLimitTable(w io.Writer, indent string, ls []*jobwirev1.RateLimitInfo) {
	tw := newTable(w)
	row(tw, indent+"NAME", "TYPE", "QUEUE", "KEY", "RATE", "BURST", "ALLOWANCE", "NEXT", "KEYS LIMITED")
	for _, i := range ls {
		l := i.GetLimit()
		keys := "-"
		if l.GetKey() != "" {
			keys = fmt.Sprintf("%d of %d", i.GetKeysLimited(), i.GetKeys())
		}
		row(tw, indent+display(l.GetName()), anyIfEmpty(l.GetType()), anyIfEmpty(l.GetQueue()), orDash(display(l.GetKey())),
			fmt.Sprintf("%d/%s", l.GetRate(), l.GetInterval().AsDuration()), l.GetBurst(), i.GetAllowance(),
			fmtTime(i.GetNextAt()), keys)
	}
	_ = tw.Flush()
}

// parseRate reads "N/INTERVAL": 50/s, 50/1s, 100/1m, 5/2h, 1000/1d.
func parseRate(s string) (int32, time.Duration, error) {
	n, per, ok := strings.Cut(s, "/")
	rate, err := strconv.ParseInt(n, 10, 32)
	if !ok || err != nil || rate < 1 {
		return 0, 0, usageErrorf("rate %q is not N/INTERVAL with N a whole number of at least 1, e.g. 50/s or 100/1m", s)
	}
	if per != "" && strings.IndexFunc(per[:1], func(r rune) bool { return r >= '0' && r <= '9' }) < 0 {
		per = "1" + per // "s" is "1s"
	}
	d, err := parseDuration(per)
	if err != nil || d < time.Millisecond {
		return 0, 0, usageErrorf("rate %q: the interval %q is not a duration of at least 1ms, e.g. s, 1s, 15m or 1d", s, per)
	}
	return int32(rate), d, nil
}

func runRateLimitsSet(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	var typ, queue, key string
	var burst int
	fs.StringVar(&typ, "type", "", "count only jobs of this type (default: any)")
	fs.StringVar(&queue, "queue", "", "count only jobs of this queue (default: any)")
	fs.StringVar(&key, "key", "", "count each key apart: type, queue, metadata.NAME or payload.FIELD")
	fs.IntVar(&burst, "burst", 0, "starts allowed at once after a quiet spell (default: the rate's N)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos, "limit name", "rate"); err != nil {
		return err
	}
	if pos[0] == "" {
		return usageErrorf("the limit name is empty")
	}
	rate, per, err := parseRate(pos[1])
	if err != nil {
		return err
	}
	if err := checkRange("burst", burst, 0, 1_000_000); err != nil {
		return err
	}
	l := &jobwirev1.RateLimit{Name: pos[0], Type: typ, Queue: queue, Key: key, Rate: rate,
		Interval: durationpb.New(per), Burst: int32(burst)}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.SetRateLimitResponse, error) {
		return b.admin.SetRateLimit(ctx, &jobwirev1.SetRateLimitRequest{Limit: l})
	}, func(*jobwirev1.SetRateLimitResponse) error {
		b := l.GetBurst()
		if b == 0 {
			b = rate
		}
		what := fmt.Sprintf("jobs of type %s in queue %s", anyIfEmpty(typ), anyIfEmpty(queue))
		if key != "" {
			what += ", each " + display(key) + " apart"
		}
		fmt.Fprintf(e.stdout, "rate limit %s: at most %d starts per %s, bursts of %d, for %s\n",
			display(l.GetName()), rate, per, b, what)
		return nil
	})
}

func runRateLimitsRemove(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos, "limit name"); err != nil {
		return err
	}
	err = request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.RemoveRateLimitResponse, error) {
		return b.admin.RemoveRateLimit(ctx, &jobwirev1.RemoveRateLimitRequest{Name: pos[0]})
	}, func(*jobwirev1.RemoveRateLimitResponse) error {
		fmt.Fprintf(e.stdout, "rate limit %s removed; the jobs it held back may start\n", display(pos[0]))
		return nil
	})
	if rpcCode(err) == codes.NotFound {
		return fmt.Errorf("rate limit %q does not exist (see 'jobwire ratelimits list')", pos[0])
	}
	return err
}
