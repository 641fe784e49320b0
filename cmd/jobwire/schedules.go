package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// The schedules commands: a periodic schedule's definition from flags (add, update), and the
// operator's actions on one (pause, resume, trigger, backfill, remove).

func runSchedulesList(ctx context.Context, e *env, c *command, args []string) error {
	cf, err := parseCommonOnly(e, c, args)
	if err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.ListSchedulesResponse, error) {
		return b.admin.ListSchedules(ctx, &jobwirev1.ListSchedulesRequest{})
	}, func(resp *jobwirev1.ListSchedulesResponse) error {
		if len(resp.GetSchedules()) == 0 {
			fmt.Fprintln(e.stdout, "no schedules yet")
			return nil
		}
		tw := newTable(e.stdout)
		row(tw, "NAME", "CRON", "TYPE", "STATUS", "NEXT FIRE", "LAST FIRE", "LAST JOB", "LAST STATE")
		for _, s := range resp.GetSchedules() {
			row(tw, display(s.GetName()), display(cronWithZone(s)), display(s.GetType()), scheduleStatus(s), fmtTime(s.GetNextFireAt()),
				fmtTime(s.GetLastFireAt()), lastJob(s), lastState(s))
		}
		return tw.Flush()
	})
}

func cronWithZone(s *jobwirev1.Schedule) string {
	if s.GetTimeZone() == "" {
		return s.GetCron()
	}
	return s.GetCron() + " (" + s.GetTimeZone() + ")"
}

func scheduleStatus(s *jobwirev1.Schedule) string {
	if s.GetPaused() {
		return "paused"
	}
	return "active"
}

func lastJob(s *jobwirev1.Schedule) string {
	if s.GetLastJobId() == 0 {
		return "-"
	}
	return fmt.Sprint(s.GetLastJobId())
}

func lastState(s *jobwirev1.Schedule) string {
	if s.GetLastJobId() == 0 {
		return "-"
	}
	if s.GetLastJobState() == jobwirev1.JobState_JOB_STATE_UNSPECIFIED {
		return "deleted"
	}
	return enumName(s.GetLastJobState())
}

// printSchedule writes one schedule, a field a line.
func printSchedule(w io.Writer, s *jobwirev1.Schedule) {
	tw := newTable(w)
	row(tw, "name:", display(s.GetName()))
	row(tw, "cron:", display(cronWithZone(s)))
	row(tw, "job:", fmt.Sprintf("type %s, queue %s, priority %d", display(s.GetType()), display(orDefault(s.GetQueue())), s.GetPriority()))
	row(tw, "overlap:", policyName(s.GetOverlap().String(), "SCHEDULE_OVERLAP_", "skip"))
	window := "24h"
	if s.GetCatchUpWindow() != nil {
		window = fmtDuration(s.GetCatchUpWindow())
	}
	row(tw, "catch up:", fmt.Sprintf("%s within %s", policyName(s.GetCatchUp().String(), "SCHEDULE_CATCH_UP_", "latest"), window))
	if s.GetJitter() != nil {
		row(tw, "jitter:", fmtDuration(s.GetJitter()))
	}
	status := scheduleStatus(s)
	if s.GetNote() != "" {
		status += ": " + display(s.GetNote())
	}
	if s.GetFromConfig() {
		status += " (declared in the configuration file)"
	}
	row(tw, "status:", status)
	row(tw, "next fire:", fmtTime(s.GetNextFireAt()))
	row(tw, "last fire:", fmt.Sprintf("%s, job %s, %s", fmtTime(s.GetLastFireAt()), lastJob(s), lastState(s)))
	if s.GetBufferedFireAt() != nil {
		row(tw, "kept back:", fmtTime(s.GetBufferedFireAt()))
	}
	_ = tw.Flush()
}

// policyName words a policy as the flags name it ("buffer-one"); unspecified is its default.
func policyName(name, prefix, unspecified string) string {
	name = strings.TrimPrefix(name, prefix)
	if name == "UNSPECIFIED" {
		return unspecified
	}
	return strings.ToLower(strings.ReplaceAll(name, "_", "-"))
}

func orDefault(q string) string {
	if q == "" {
		return "default"
	}
	return q
}

func runSchedulesGet(ctx context.Context, e *env, c *command, args []string) error {
	return runScheduleCall(ctx, e, c, args, nil, func(ctx context.Context, a jobwirev1.AdminServiceClient, name string) (*jobwirev1.GetScheduleResponse, error) {
		return a.GetSchedule(ctx, &jobwirev1.GetScheduleRequest{Name: name})
	}, func(resp *jobwirev1.GetScheduleResponse) { printSchedule(e.stdout, resp.GetSchedule()) })
}

// runScheduleCall runs a command whose one positional is a schedule's name: flags adds its
// own flags, send makes the call and done words its answer.
func runScheduleCall[R proto.Message](ctx context.Context, e *env, c *command, args []string, flags func(*flag.FlagSet) func() error,
	send func(context.Context, jobwirev1.AdminServiceClient, string) (R, error), done func(R)) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	check := func() error { return nil }
	if flags != nil {
		check = flags(fs)
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos, "schedule name"); err != nil {
		return err
	}
	if pos[0] == "" {
		return usageErrorf("the schedule name is empty")
	}
	if err := check(); err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (R, error) { return send(ctx, b.admin, pos[0]) },
		func(resp R) error {
			done(resp)
			return nil
		})
}

// scheduleFlags are the flags of a schedule's definition.
type scheduleFlags struct {
	cron, zone, typ, payload, queue, overlap, catchUp string
	priority, maxAttempts                             int
	attemptTimeout, jitter, window                    time.Duration
	metadata                                          metadataValue
}

func (f *scheduleFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&f.cron, "cron", "", "when it fires: 5 fields (\"*/5 * * * *\"), @hourly, @daily, @weekly, @monthly, @yearly or \"@every 10m\"")
	fs.StringVar(&f.zone, "time-zone", "", "the IANA time zone the cron expression is read in, e.g. Europe/Paris (default UTC)")
	fs.StringVar(&f.typ, "type", "", "the job type each occurrence enqueues")
	fs.StringVar(&f.payload, "payload", "", "the job's payload as JSON; checked before sending")
	fs.StringVar(&f.queue, "queue", "", "the job's queue (default \"default\")")
	fs.IntVar(&f.priority, "priority", 0, "the job's priority, -1000..1000; higher runs first")
	fs.IntVar(&f.maxAttempts, "max-attempts", 0, "attempts allowed, including the first (default: the type's policy)")
	fs.Var(durationValue{&f.attemptTimeout}, "attempt-timeout", "how long one attempt may run (default: the broker's)")
	fs.Var(&f.metadata, "metadata", "KEY=VALUE stored with each job and handed to its worker; repeat for more")
	fs.Var(durationValue{&f.jitter}, "jitter", "delay each occurrence's job by a random time below this, e.g. 30s")
	fs.StringVar(&f.overlap, "overlap", "", "while the previous occurrence's job has not finished: skip (default), buffer-one, allow-all or cancel-previous")
	fs.StringVar(&f.catchUp, "catch-up", "", "occurrences missed while no broker ran: latest (default, once), skip or all")
	fs.Var(durationValue{&f.window}, "catch-up-window", "how far back missed occurrences are caught up (default 24h)")
}

// definitionFlags are the names of the flags add defines.
var definitionFlags = []string{"cron", "time-zone", "type", "payload", "queue", "priority", "max-attempts", "attempt-timeout",
	"metadata", "jitter", "overlap", "catch-up", "catch-up-window"}

// anyGiven reports whether any flag of the definition was given.
func (f *scheduleFlags) anyGiven(fs *flag.FlagSet) bool {
	for _, name := range definitionFlags {
		if flagGiven(fs, name) {
			return true
		}
	}
	return false
}

// apply sets in s what the flags given say, and checks it.
func (f *scheduleFlags) apply(fs *flag.FlagSet, s *jobwirev1.Schedule) error {
	given := func(name string) bool { return flagGiven(fs, name) }
	set := map[string]func() error{
		"cron":      func() error { s.Cron = f.cron; return nil },
		"time-zone": func() error { s.TimeZone = f.zone; return nil },
		"type":      func() error { s.Type = f.typ; return nil },
		"queue":     func() error { s.Queue = f.queue; return nil },
		"priority": func() error {
			s.Priority = int32(f.priority)
			return checkRange("priority", f.priority, minPriority, maxPriority)
		},
		"max-attempts": func() error {
			s.MaxAttempts = int32(f.maxAttempts)
			return checkRange("max-attempts", f.maxAttempts, 0, maxAttemptsLimit)
		},
		"attempt-timeout": func() error {
			s.AttemptTimeout = optDuration(f.attemptTimeout)
			return nonNegative("attempt-timeout", f.attemptTimeout)
		},
		"jitter":          func() error { s.Jitter = optDuration(f.jitter); return nonNegative("jitter", f.jitter) },
		"catch-up-window": func() error { s.CatchUpWindow = optDuration(f.window); return nonNegative("catch-up-window", f.window) },
		"metadata":        func() error { s.Metadata = f.metadata.m; return nil },
		"payload": func() (err error) {
			s.Payload, err = parseJSONPayload("payload", f.payload)
			return err
		},
		"overlap": func() error {
			v, ok := enumValue(jobwirev1.ScheduleOverlap_value, "SCHEDULE_OVERLAP_", f.overlap)
			if !ok {
				return usageErrorf("unknown --overlap %q; want one of %s", f.overlap, strings.ReplaceAll(enumChoices(jobwirev1.ScheduleOverlap_name, "SCHEDULE_OVERLAP_"), "_", "-"))
			}
			s.Overlap = jobwirev1.ScheduleOverlap(v)
			return nil
		},
		"catch-up": func() error {
			v, ok := enumValue(jobwirev1.ScheduleCatchUp_value, "SCHEDULE_CATCH_UP_", f.catchUp)
			if !ok {
				return usageErrorf("unknown --catch-up %q; want one of %s", f.catchUp, enumChoices(jobwirev1.ScheduleCatchUp_name, "SCHEDULE_CATCH_UP_"))
			}
			s.CatchUp = jobwirev1.ScheduleCatchUp(v)
			return nil
		},
	}
	for _, name := range sortedKeys(set) {
		if given(name) {
			if err := set[name](); err != nil {
				return err
			}
		}
	}
	return nil
}

func nonNegative(name string, d time.Duration) error {
	if d < 0 {
		return usageErrorf("--%s must not be negative", name)
	}
	return nil
}

func optDuration(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

// metadataValue collects repeated KEY=VALUE flags.
type metadataValue struct{ m map[string]string }

func (v *metadataValue) String() string { return "" }

func (v *metadataValue) Set(s string) error {
	k, val, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not KEY=VALUE", s)
	}
	if v.m == nil {
		v.m = make(map[string]string)
	}
	v.m[k] = val
	return nil
}

func runSchedulesAdd(ctx context.Context, e *env, c *command, args []string) error {
	var f scheduleFlags
	var fs *flag.FlagSet
	s := &jobwirev1.Schedule{}
	return runScheduleCall(ctx, e, c, args, func(set *flag.FlagSet) func() error {
		fs = set
		f.add(fs)
		return func() error {
			if !flagGiven(fs, "cron") || !flagGiven(fs, "type") {
				return usageErrorf("--cron and --type are required")
			}
			return f.apply(fs, s)
		}
	}, func(ctx context.Context, a jobwirev1.AdminServiceClient, name string) (*jobwirev1.AddScheduleResponse, error) {
		s.Name = name
		return a.AddSchedule(ctx, &jobwirev1.AddScheduleRequest{Schedule: s})
	}, func(resp *jobwirev1.AddScheduleResponse) {
		fmt.Fprintf(e.stdout, "schedule %s added; it fires next at %s\n", display(resp.GetSchedule().GetName()), fmtTime(resp.GetSchedule().GetNextFireAt()))
	})
}

// runSchedulesUpdate reads the schedule, changes what the flags given say and sends it back.
func runSchedulesUpdate(ctx context.Context, e *env, c *command, args []string) error {
	var f scheduleFlags
	var fs *flag.FlagSet
	return runScheduleCall(ctx, e, c, args, func(set *flag.FlagSet) func() error {
		fs = set
		f.add(fs)
		return func() error {
			if !f.anyGiven(fs) {
				return usageErrorf("nothing to change: give at least one of --cron, --type, --payload, --overlap...")
			}
			return f.apply(fs, &jobwirev1.Schedule{}) // checked now, applied to the schedule read
		}
	}, func(ctx context.Context, a jobwirev1.AdminServiceClient, name string) (*jobwirev1.UpdateScheduleResponse, error) {
		cur, err := a.GetSchedule(ctx, &jobwirev1.GetScheduleRequest{Name: name})
		if err != nil {
			return nil, err
		}
		s := cur.GetSchedule()
		if err := f.apply(fs, s); err != nil {
			return nil, err
		}
		return a.UpdateSchedule(ctx, &jobwirev1.UpdateScheduleRequest{Schedule: s})
	}, func(resp *jobwirev1.UpdateScheduleResponse) {
		fmt.Fprintf(e.stdout, "schedule %s updated; it fires next at %s\n", display(resp.GetSchedule().GetName()), fmtTime(resp.GetSchedule().GetNextFireAt()))
	})
}

func runSchedulesRemove(ctx context.Context, e *env, c *command, args []string) error {
	var name string
	return runScheduleCall(ctx, e, c, args, nil, func(ctx context.Context, a jobwirev1.AdminServiceClient, n string) (*jobwirev1.RemoveScheduleResponse, error) {
		name = n
		return a.RemoveSchedule(ctx, &jobwirev1.RemoveScheduleRequest{Name: n})
	}, func(*jobwirev1.RemoveScheduleResponse) {
		fmt.Fprintf(e.stdout, "schedule %s removed; the jobs it enqueued stay\n", display(name))
	})
}

func runSchedulesPause(ctx context.Context, e *env, c *command, args []string) error {
	var note string
	return runScheduleCall(ctx, e, c, args, func(fs *flag.FlagSet) func() error {
		fs.StringVar(&note, "note", "", "why it is paused, shown with it")
		return func() error { return nil }
	}, func(ctx context.Context, a jobwirev1.AdminServiceClient, name string) (*jobwirev1.PauseScheduleResponse, error) {
		return a.PauseSchedule(ctx, &jobwirev1.PauseScheduleRequest{Name: name, Note: note})
	}, func(resp *jobwirev1.PauseScheduleResponse) {
		fmt.Fprintf(e.stdout, "schedule %s is paused; its occurrences are skipped until it is resumed\n", display(resp.GetSchedule().GetName()))
	})
}

func runSchedulesResume(ctx context.Context, e *env, c *command, args []string) error {
	return runScheduleCall(ctx, e, c, args, nil, func(ctx context.Context, a jobwirev1.AdminServiceClient, name string) (*jobwirev1.ResumeScheduleResponse, error) {
		return a.ResumeSchedule(ctx, &jobwirev1.ResumeScheduleRequest{Name: name})
	}, func(resp *jobwirev1.ResumeScheduleResponse) {
		fmt.Fprintf(e.stdout, "schedule %s is active; it fires next at %s\n", display(resp.GetSchedule().GetName()), fmtTime(resp.GetSchedule().GetNextFireAt()))
	})
}

func runSchedulesTrigger(ctx context.Context, e *env, c *command, args []string) error {
	return runScheduleCall(ctx, e, c, args, nil, func(ctx context.Context, a jobwirev1.AdminServiceClient, name string) (*jobwirev1.TriggerScheduleResponse, error) {
		return a.TriggerSchedule(ctx, &jobwirev1.TriggerScheduleRequest{Name: name})
	}, func(resp *jobwirev1.TriggerScheduleResponse) { fmt.Fprintln(e.stdout, resp.GetJobId()) })
}

func runSchedulesBackfill(ctx context.Context, e *env, c *command, args []string) error {
	var from, to string
	var req jobwirev1.BackfillScheduleRequest
	return runScheduleCall(ctx, e, c, args, func(fs *flag.FlagSet) func() error {
		fs.StringVar(&from, "from", "", "the first time of the range, RFC 3339 (required)")
		fs.StringVar(&to, "to", "", "the end of the range, not included, RFC 3339 (required)")
		return func() error {
			if from == "" || to == "" {
				return usageErrorf("--from and --to are required")
			}
			f, err := parseTime("from", from)
			if err != nil {
				return err
			}
			t, err := parseTime("to", to)
			if err != nil {
				return err
			}
			if !f.Before(t) {
				return usageErrorf("--from %s is not before --to %s", from, to)
			}
			req.From, req.To = timestamppb.New(f), timestamppb.New(t)
			return nil
		}
	}, func(ctx context.Context, a jobwirev1.AdminServiceClient, name string) (*jobwirev1.BackfillScheduleResponse, error) {
		req.Name = name
		return a.BackfillSchedule(ctx, &req)
	}, func(resp *jobwirev1.BackfillScheduleResponse) {
		fmt.Fprintf(e.stdout, "enqueued %s; %s of the range had been enqueued before\n", count(len(resp.GetJobIds()), "occurrence"), count(resp.GetExisting(), "occurrence"))
	})
}
