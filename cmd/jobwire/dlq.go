package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	jwbroker "github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// filterFlags are the flags that select dead jobs.
type filterFlags struct {
	fs                                   *flag.FlagSet
	queue, typ, reason, errorType, after string
	before                               string
	since                                time.Duration
}

var filterFlagNames = []string{"queue", "type", "reason", "error-type", "since", "after", "before"}

func addFilterFlags(fs *flag.FlagSet) *filterFlags {
	f := &filterFlags{fs: fs}
	fs.StringVar(&f.queue, "queue", "", "only dead jobs of this queue")
	fs.StringVar(&f.typ, "type", "", "only dead jobs of this type")
	fs.StringVar(&f.reason, "reason", "", "only jobs dead for this reason (fatal, max-attempts-exhausted, retry-lifetime-expired, lease-expired, timeout)")
	fs.StringVar(&f.errorType, "error-type", "", "only jobs whose last error has this type")
	fs.Var(durationValue{&f.since}, "since", "only jobs that died within this long, e.g. 1h or 2d")
	fs.StringVar(&f.after, "after", "", "only jobs that died after this RFC 3339 time")
	fs.StringVar(&f.before, "before", "", "only jobs that died before this RFC 3339 time")
	return f
}

// given reports whether any filter flag was on the command line.
func (f *filterFlags) given() bool {
	for _, n := range filterFlagNames {
		if flagGiven(f.fs, n) {
			return true
		}
	}
	return false
}

func (f *filterFlags) build(now time.Time) (*jobwirev1.DeadJobFilter, error) {
	pb := &jobwirev1.DeadJobFilter{Queue: f.queue, Type: f.typ, ErrorType: f.errorType}
	if f.reason != "" {
		r, err := parseDeadReason(f.reason)
		if err != nil {
			return nil, err
		}
		pb.Reason = r
	}
	switch {
	case f.since != 0 && f.after != "":
		return nil, usageErrorf("give --since or --after, not both")
	case f.since < 0:
		return nil, usageErrorf("--since must not be negative")
	case f.since > 0:
		pb.DeadAfter = timestamppb.New(now.Add(-f.since))
	case f.after != "":
		t, err := parseTime("after", f.after)
		if err != nil {
			return nil, err
		}
		pb.DeadAfter = timestamppb.New(t)
	}
	if f.before != "" {
		t, err := parseTime("before", f.before)
		if err != nil {
			return nil, err
		}
		pb.DeadBefore = timestamppb.New(t)
	}
	if pb.DeadAfter != nil && pb.DeadBefore != nil && !pb.DeadAfter.AsTime().Before(pb.DeadBefore.AsTime()) {
		return nil, usageErrorf("the time window is empty: --before is not later than --after/--since")
	}
	return pb, nil
}

func runDLQList(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	ff := addFilterFlags(fs)
	sf := addSortFlags(fs, jwbroker.DeadSortColumns())
	var limit int
	var token string
	fs.IntVar(&limit, "limit", 0, "jobs per page, 1..1000 (default: the broker's, 100)")
	fs.StringVar(&token, "page-token", "", "continue from a previous page (with the same --sort and --asc)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos); err != nil {
		return err
	}
	req := &jobwirev1.ListDeadJobsRequest{PageToken: token}
	if req.Sort, req.Ascending, err = sf.build(); err != nil {
		return err
	}
	if req.Filter, err = ff.build(e.now()); err != nil {
		return err
	}
	if req.PageSize, err = pageSize(limit); err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.ListDeadJobsResponse, error) {
		return b.admin.ListDeadJobs(ctx, req)
	}, func(resp *jobwirev1.ListDeadJobsResponse) error {
		if len(resp.GetJobs()) == 0 {
			fmt.Fprintln(e.stdout, "no dead jobs match")
		} else {
			printDeadTable(e.stdout, resp.GetJobs())
		}
		printNextPage(e.stderr, resp.GetNextPageToken())
		return nil
	})
}

func printDeadTable(w io.Writer, jobs []*jobwirev1.Job) {
	tw := newTable(w)
	row(tw, "ID", "TYPE", "QUEUE", "REASON", "ATTEMPTS", "DIED", "LAST ERROR")
	for _, j := range jobs {
		row(tw, j.GetId(), j.GetType(), j.GetQueue(), enumName(j.GetDeadReason()), attempts(j),
			fmtTime(j.GetFinishedAt()), orDash(oneLine(lastError(j), 80)))
	}
	_ = tw.Flush()
}

func runDLQShow(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	id, err := parseIDArg(fs, args)
	if err != nil {
		return err
	}
	resp, err := fetch(ctx, cf, func(ctx context.Context, b *broker) (*jobwirev1.GetJobResponse, error) {
		return b.producer.GetJob(ctx, &jobwirev1.GetJobRequest{Id: id})
	})
	if err != nil {
		return err
	}
	j := resp.GetJob()
	if j.GetState() != jobwirev1.JobState_JOB_STATE_DEAD {
		fmt.Fprintf(e.stderr, "note: job %d is %s, not in the dead-letter queue\n", j.GetId(), enumName(j.GetState()))
	}
	return show(e, cf, resp, func(*jobwirev1.GetJobResponse) error {
		printDeadJob(e.stdout, j)
		return nil
	})
}

// printDeadJob writes a job with its payload and every attempt in full, details included:
// what one needs to decide whether to requeue it.
func printDeadJob(w io.Writer, j *jobwirev1.Job) {
	printJob(w, j)
	for _, a := range j.GetAttemptHistory() {
		fmt.Fprintf(w, "\nAttempt %d: %s", a.GetNumber(), enumName(a.GetOutcome()))
		if a.GetFailureKind() != jobwirev1.FailureKind_FAILURE_KIND_UNSPECIFIED {
			fmt.Fprintf(w, " (%s)", enumName(a.GetFailureKind()))
		}
		fmt.Fprintln(w)
		tw := newTable(w)
		row(tw, "  Worker", orDash(a.GetWorkerId()))
		row(tw, "  Started", fmtTime(a.GetStartedAt()))
		row(tw, "  Finished", fmtTime(a.GetFinishedAt()))
		row(tw, "  Error type", orDash(a.GetErrorType()))
		row(tw, "  Message", orDash(oneLine(a.GetMessage(), 10000)))
		_ = tw.Flush()
		if d := strings.TrimRight(a.GetDetails(), "\n"); d != "" {
			fmt.Fprintln(w, "  Details:")
			displayLines(w, "    ", d)
		}
	}
}

// bulkFlags are the flags shared by requeue and purge.
type bulkFlags struct {
	filter      *filterFlags
	allMatching bool
	limit       int
	yes         bool
}

func addBulkFlags(fs *flag.FlagSet) *bulkFlags {
	bf := &bulkFlags{filter: addFilterFlags(fs)}
	fs.BoolVar(&bf.allMatching, "all-matching", false, "act on every dead job the filter flags match, instead of on ids")
	fs.IntVar(&bf.limit, "limit", 0, "most jobs to touch in one run, 1..10000 (default: the broker's, 1000)")
	fs.BoolVar(&bf.yes, "yes", false, "with --all-matching: act; without it only a preview is shown")
	return bf
}

// selection builds the BulkSelection from ids or from the filter flags, refusing the mixes
// that would make it unclear which jobs are meant.
func (bf *bulkFlags) selection(e *env, pos []string) (*jobwirev1.BulkSelection, error) {
	if bf.limit < 0 || bf.limit > 10000 {
		return nil, usageErrorf("--limit %d is outside 1..10000", bf.limit)
	}
	sel := &jobwirev1.BulkSelection{Limit: int32(bf.limit)}
	switch {
	case len(pos) > 0 && bf.allMatching:
		return nil, usageErrorf("give job ids or --all-matching, not both")
	case len(pos) > 0 && bf.filter.given():
		return nil, usageErrorf("filter flags select jobs only with --all-matching; with ids, drop them")
	case len(pos) == 0 && !bf.allMatching:
		if bf.filter.given() {
			return nil, usageErrorf("add --all-matching to act on the jobs the filter flags match")
		}
		return nil, usageErrorf("name the dead jobs by id, or use --all-matching with filter flags")
	case len(pos) > 0:
		for _, p := range pos {
			id, err := parseID(p)
			if err != nil {
				return nil, err
			}
			sel.Ids = append(sel.Ids, id)
		}
	default:
		f, err := bf.filter.build(e.now())
		if err != nil {
			return nil, err
		}
		sel.Filter = f
		// --all-matching with no filter flag means every dead job, which the broker takes
		// only when said so; the preview below still comes first.
		sel.All = !bf.filter.given()
	}
	return sel, nil
}

// bulkResponse is what RequeueDeadJobs and PurgeDeadJobs both answer.
type bulkResponse interface {
	proto.Message
	GetMatched() int32
	GetAffected() int32
	GetSample() []*jobwirev1.Job
}

// defaultBulkLimit is the broker's cap on one bulk call when --limit is not given (see
// BulkSelection.limit in the API).
const defaultBulkLimit = 1000

// runBulk runs a requeue or a purge. By ids it acts at once. By filter it first previews, and
// acts only with --yes, so that a mistyped filter cannot requeue or delete the wrong thousand
// jobs.
func runBulk[R bulkResponse](ctx context.Context, e *env, cf *commonFlags, bf *bulkFlags, sel *jobwirev1.BulkSelection,
	verb, past string, send func(context.Context, jobwirev1.AdminServiceClient, *jobwirev1.BulkSelection) (R, error)) error {
	b, err := connect(ctx, cf)
	if err != nil {
		return err
	}
	defer b.close()
	do := func(preview bool) (R, error) {
		s := proto.Clone(sel).(*jobwirev1.BulkSelection)
		s.Preview = preview
		return call(ctx, b, func(ctx context.Context) (R, error) { return send(ctx, b.admin, s) })
	}

	if sel.Filter != nil {
		preview, err := do(true)
		if err != nil {
			return err
		}
		if !bf.yes || preview.GetMatched() == 0 {
			return show(e, cf, preview, func(preview R) error {
				printBulkPreview(e.stdout, preview, effectiveLimit(bf.limit))
				if preview.GetMatched() > 0 {
					fmt.Fprintf(e.stdout, "re-run with --yes to %s %s\n", verb, count(preview.GetMatched(), "job"))
				}
				return nil
			})
		}
		if !cf.json {
			printBulkPreview(e.stdout, preview, effectiveLimit(bf.limit))
		}
	}
	resp, err := do(false)
	if err != nil {
		return err
	}
	return show(e, cf, resp, func(resp R) error {
		fmt.Fprintf(e.stdout, "%s %d of %s\n", past, resp.GetAffected(), count(resp.GetMatched(), "matched job"))
		if sel.Filter != nil && int(resp.GetMatched()) >= effectiveLimit(bf.limit) {
			fmt.Fprintln(e.stdout, "the limit was reached and more jobs may match: run again to continue")
		}
		return nil
	})
}

func effectiveLimit(limit int) int {
	if limit == 0 {
		return defaultBulkLimit
	}
	return limit
}

func printBulkPreview(w io.Writer, r interface {
	GetMatched() int32
	GetSample() []*jobwirev1.Job
}, limit int) {
	if r.GetMatched() == 0 {
		fmt.Fprintln(w, "no dead jobs match")
		return
	}
	if r.GetMatched() == 1 {
		fmt.Fprint(w, "1 dead job matches")
	} else {
		fmt.Fprintf(w, "%d dead jobs match", r.GetMatched())
	}
	if int(r.GetMatched()) >= limit {
		fmt.Fprintf(w, " (the limit of one run; more may match)")
	}
	fmt.Fprintln(w)
	if len(r.GetSample()) > 0 {
		fmt.Fprintf(w, "sample of %d:\n", len(r.GetSample()))
		printDeadTable(w, r.GetSample())
	}
}

func runDLQRequeue(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	bf := addBulkFlags(fs)
	var priority int
	var payload, runAt string
	fs.IntVar(&priority, "priority", 0, "new priority for the requeued jobs (default: keep each job's)")
	fs.StringVar(&payload, "payload", "", "corrected payload as JSON; only with exactly one job id")
	fs.StringVar(&runAt, "run-at", "", "run the requeued jobs at this RFC 3339 time (default: now)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	sel, err := bf.selection(e, pos)
	if err != nil {
		return err
	}
	req := &jobwirev1.RequeueDeadJobsRequest{}
	if flagGiven(fs, "priority") {
		if err := checkRange("priority", priority, minPriority, maxPriority); err != nil {
			return err
		}
		p := int32(priority)
		req.Priority = &p
	}
	if flagGiven(fs, "payload") {
		if len(sel.Ids) != 1 {
			return usageErrorf("--payload replaces one job's payload: name exactly one job id")
		}
		if req.Payload, err = parseJSONPayload("payload", payload); err != nil {
			return err
		}
	}
	if runAt != "" {
		t, err := parseTime("run-at", runAt)
		if err != nil {
			return err
		}
		req.RunAt = timestamppb.New(t)
	}
	return runBulk(ctx, e, cf, bf, sel, "requeue", "requeued",
		func(ctx context.Context, a jobwirev1.AdminServiceClient, s *jobwirev1.BulkSelection) (*jobwirev1.RequeueDeadJobsResponse, error) {
			r := proto.Clone(req).(*jobwirev1.RequeueDeadJobsRequest)
			r.Selection = s
			return a.RequeueDeadJobs(ctx, r)
		})
}

func runDLQPurge(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	bf := addBulkFlags(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	sel, err := bf.selection(e, pos)
	if err != nil {
		return err
	}
	return runBulk(ctx, e, cf, bf, sel, "purge", "purged",
		func(ctx context.Context, a jobwirev1.AdminServiceClient, s *jobwirev1.BulkSelection) (*jobwirev1.PurgeDeadJobsResponse, error) {
			return a.PurgeDeadJobs(ctx, &jobwirev1.PurgeDeadJobsRequest{Selection: s})
		})
}

func runDLQTop(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	ff := addFilterFlags(fs)
	var limit int
	fs.IntVar(&limit, "limit", 0, "error types to show (default: the broker's, 20)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos); err != nil {
		return err
	}
	if limit < 0 || limit > 10000 {
		return usageErrorf("--limit %d is out of range", limit)
	}
	req := &jobwirev1.TopDeadErrorsRequest{Limit: int32(limit)}
	if req.Filter, err = ff.build(e.now()); err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.TopDeadErrorsResponse, error) {
		return b.admin.TopDeadErrors(ctx, req)
	}, func(resp *jobwirev1.TopDeadErrorsResponse) error {
		if len(resp.GetGroups()) == 0 {
			fmt.Fprintln(e.stdout, "no dead jobs match")
			return nil
		}
		tw := newTable(e.stdout)
		row(tw, "ERROR TYPE", "COUNT", "LAST SEEN", "SAMPLE MESSAGE")
		for _, g := range resp.GetGroups() {
			row(tw, orDash(g.GetErrorType()), g.GetCount(), fmtTime(g.GetLastSeen()), orDash(oneLine(g.GetSampleMessage(), 80)))
		}
		return tw.Flush()
	})
}
