package main

import (
	"context"
	"fmt"
	"io"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

func runBreakersList(ctx context.Context, e *env, c *command, args []string) error {
	cf, err := parseCommonOnly(e, c, args)
	if err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.ListBreakersResponse, error) {
		return b.admin.ListBreakers(ctx, &jobwirev1.ListBreakersRequest{})
	}, func(resp *jobwirev1.ListBreakersResponse) error {
		if len(resp.GetBreakers()) == 0 {
			fmt.Fprintln(e.stdout, "no breakers yet")
			return nil
		}
		printBreakers(e.stdout, resp.GetBreakers()...)
		return nil
	})
}

func printBreakers(w io.Writer, bs ...*jobwirev1.BreakerInfo) {
	tw := newTable(w)
	row(tw, "TYPE", "STATE", "FAILURES", "CALLS", "OPENED", "NEXT PROBE", "PROBES", "GENERATION", "LAST CHANGE")
	for _, br := range bs {
		state := enumName(br.GetState())
		if br.GetDisabled() {
			state = "DISABLED"
		}
		calls := "-"
		if br.GetMode() == "ratio" && br.GetState() == jobwirev1.BreakerState_BREAKER_STATE_CLOSED {
			calls = fmt.Sprint(br.GetCallsInWindow())
		}
		changed := "-"
		if br.GetChangedReason() != "" {
			changed = br.GetChangedReason() + " at " + fmtTime(br.GetChangedAt())
		}
		row(tw, br.GetType(), state, br.GetFailuresInWindow(), calls, fmtTime(br.GetOpenedAt()),
			fmtTime(br.GetNextProbeAt()), br.GetProbesInFlight(), br.GetGeneration(), changed)
	}
	_ = tw.Flush()
	for _, br := range bs {
		if tr := br.GetTrip(); tr != nil {
			fmt.Fprintf(w, "\n%s opened at %s: %s\n", display(br.GetType()), fmtTime(tr.GetAt()), display(tripSummary(tr)))
			for _, f := range tr.GetLastFailures() {
				msg := f.GetMessage()
				if msg == "" {
					msg = "(no message)"
				}
				fmt.Fprintf(w, "  job %d  %s  %s  %s\n", f.GetJobId(), display(f.GetKind()), fmtTime(f.GetAt()), display(msg))
			}
		}
	}
}

// tripSummary says in a line why a breaker opened.
func tripSummary(tr *jobwirev1.BreakerTrip) string {
	window := tr.GetWindow().AsDuration()
	switch tr.GetReason() {
	case "ratio":
		return fmt.Sprintf("%d of %d calls failed (%.0f%%) within %v (mode ratio)",
			tr.GetFailures(), tr.GetCalls(), 100*tr.GetRatio(), window)
	case "threshold":
		return fmt.Sprintf("%d failures within %v (mode count)", tr.GetFailures(), window)
	case "fatal":
		return "a fatal failure under open_on_fatal"
	case "probe_failed":
		return "a probe failed"
	}
	return tr.GetReason()
}

func runBreakersReset(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos, "job type"); err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.ResetBreakerResponse, error) {
		return b.admin.ResetBreaker(ctx, &jobwirev1.ResetBreakerRequest{Type: pos[0]})
	}, func(resp *jobwirev1.ResetBreakerResponse) error {
		printBreakers(e.stdout, resp.GetBreaker())
		return nil
	})
}

func runBreakersForce(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos, "job type", "state"); err != nil {
		return err
	}
	state, err := parseBreakerState(pos[1])
	if err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.ForceBreakerResponse, error) {
		return b.admin.ForceBreaker(ctx, &jobwirev1.ForceBreakerRequest{Type: pos[0], State: state})
	}, func(resp *jobwirev1.ForceBreakerResponse) error {
		printBreakers(e.stdout, resp.GetBreaker())
		return nil
	})
}
