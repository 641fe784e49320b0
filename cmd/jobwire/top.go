package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"time"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// jobwire top: a live view of the broker in the terminal: throughput, jobs by state, queues and
// the breakers that are not closed, read with GetStats and ListBreakers (what `jobwire stats`
// and `jobwire breakers list` show) and redrawn every interval.

// topStates are the job states top counts, in the order it shows them.
var topStates = []jobwirev1.JobState{
	jobwirev1.JobState_JOB_STATE_PENDING, jobwirev1.JobState_JOB_STATE_SCHEDULED, jobwirev1.JobState_JOB_STATE_WAITING,
	jobwirev1.JobState_JOB_STATE_LEASED,
	jobwirev1.JobState_JOB_STATE_RUNNING, jobwirev1.JobState_JOB_STATE_SUCCEEDED, jobwirev1.JobState_JOB_STATE_DEAD,
	jobwirev1.JobState_JOB_STATE_CANCELLED,
}

// topSample is what one frame read.
type topSample struct {
	at       time.Time
	byState  map[jobwirev1.JobState]int64
	total    int64
	stats    *jobwirev1.GetStatsResponse
	breakers []*jobwirev1.BreakerInfo
}

func runTop(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	interval := time.Second
	fs.Var(durationValue{&interval}, "interval", "time between frames")
	count := fs.Int("count", 0, "draw this many frames, then exit (0: until Ctrl-C)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos); err != nil {
		return err
	}
	if interval < 100*time.Millisecond {
		return usageErrorf("--interval must be at least 100ms, got %s", interval)
	}
	if *count < 0 {
		return usageErrorf("--count must be zero or more, got %d", *count)
	}
	b, err := connect(ctx, cf)
	if err != nil {
		return err
	}
	defer b.close()
	clear := isTerminal(e.stdout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var prev *topSample
	for frame := 1; ; frame++ {
		cur, err := readTop(ctx, b, e.now())
		if err != nil {
			return err
		}
		var out bytes.Buffer
		switch {
		case cf.json:
			// A stream of JSON documents, two a frame: what stats --json and breakers list
			// --json print.
			if err := printJSON(&out, cur.stats); err != nil {
				return err
			}
			if err := printJSON(&out, &jobwirev1.ListBreakersResponse{Breakers: cur.breakers}); err != nil {
				return err
			}
		case clear:
			out.WriteString("\x1b[H\x1b[2J") // home, clear screen
			fallthrough
		default:
			drawTop(&out, b.addr, prev, cur, interval)
		}
		if _, err := e.stdout.Write(out.Bytes()); err != nil {
			return err
		}
		prev = cur
		if *count > 0 && frame >= *count {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil // Ctrl-C ends top; that is not an error
		case <-tick.C:
		}
	}
}

// readTop reads one frame's worth from the broker.
func readTop(ctx context.Context, b *broker, now time.Time) (*topSample, error) {
	stats, err := call(ctx, b, func(ctx context.Context) (*jobwirev1.GetStatsResponse, error) {
		return b.admin.GetStats(ctx, &jobwirev1.GetStatsRequest{})
	})
	if err != nil {
		return nil, err
	}
	br, err := call(ctx, b, func(ctx context.Context) (*jobwirev1.ListBreakersResponse, error) {
		return b.admin.ListBreakers(ctx, &jobwirev1.ListBreakersRequest{})
	})
	if err != nil {
		return nil, err
	}
	s := &topSample{at: now, byState: map[jobwirev1.JobState]int64{}, stats: stats, breakers: br.GetBreakers()}
	for _, c := range stats.GetCounts() {
		s.byState[c.GetState()] += c.GetCount()
		s.total += c.GetCount()
	}
	return s, nil
}

// drawTop writes one frame. Rates need the previous frame; the first shows "-".
func drawTop(w io.Writer, addr string, prev, cur *topSample, interval time.Duration) {
	fmt.Fprintf(w, "jobwire top: %s at %s, every %s (Ctrl-C quits)\n\n", display(addr), cur.at.UTC().Format(time.TimeOnly), interval)
	rate := func(now, before int64) string {
		if prev == nil {
			return "-"
		}
		secs := cur.at.Sub(prev.at).Seconds()
		if secs <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f/s", float64(max(now-before, 0))/secs)
	}
	var failedMinute int64
	for _, r := range cur.stats.GetRecent() {
		if r.GetWindow().AsDuration() == time.Minute {
			failedMinute = r.GetFailed()
		}
	}
	var before topSample
	if prev != nil {
		before = *prev
	}
	succeeded := jobwirev1.JobState_JOB_STATE_SUCCEEDED
	fmt.Fprintf(w, "Throughput: enqueued %s  succeeded %s  failed attempts %.1f/s (last minute)\n",
		rate(cur.total, before.total), rate(cur.byState[succeeded], before.byState[succeeded]), float64(failedMinute)/60)
	fmt.Fprint(w, "Jobs:")
	for _, st := range topStates {
		fmt.Fprintf(w, "  %s %d", enumName(st), cur.byState[st])
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "\nQueues:")
	if len(cur.stats.GetQueues()) == 0 {
		fmt.Fprintln(w, "  none")
	} else {
		printQueueTable(w, "  ", cur.stats.GetQueues())
	}

	fmt.Fprintln(w, "\nBreakers not closed:")
	tw := newTable(w)
	open := 0
	for _, br := range cur.breakers {
		if br.GetState() == jobwirev1.BreakerState_BREAKER_STATE_CLOSED {
			continue
		}
		if open == 0 {
			row(tw, "  TYPE", "STATE", "FAILURES", "NEXT PROBE")
		}
		open++
		next := "-"
		if br.GetNextProbeAt() != nil {
			next = br.GetNextProbeAt().AsTime().UTC().Format(time.TimeOnly)
		}
		row(tw, "  "+display(br.GetType()), enumName(br.GetState()), br.GetFailuresInWindow(), next)
	}
	_ = tw.Flush()
	if open == 0 {
		fmt.Fprintln(w, "  none")
	}
}

// isTerminal reports whether w is a terminal, where top redraws in place; elsewhere (a pipe,
// a file) frames follow one another.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
