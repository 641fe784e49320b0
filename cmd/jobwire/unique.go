package main

import (
	"flag"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// uniqueFlags are enqueue's flags for a unique job (JobSpec.unique). Any of them makes the
// job unique.
type uniqueFlags struct {
	on, byPayload, acrossQueues bool
	key, fields, states         string
	period                      time.Duration
}

func addUniqueFlags(fs *flag.FlagSet) *uniqueFlags {
	u := &uniqueFlags{}
	fs.BoolVar(&u.on, "unique", false, "make the job unique by type and queue (with the --unique-* flags, by more)")
	fs.StringVar(&u.key, "unique-key", "", "unique by this key of yours, such as a customer id")
	fs.BoolVar(&u.byPayload, "unique-by-payload", false, "unique by the whole payload")
	fs.StringVar(&u.fields, "unique-fields", "", "unique by these comma-separated fields: payload.FIELD[.SUB] or metadata.NAME")
	fs.BoolVar(&u.acrossQueues, "unique-across-queues", false, "leave the queue out: one job among all queues")
	fs.Var(durationValue{&u.period}, "unique-period", "unique within windows of this length, e.g. 1h (a new job in the next window)")
	fs.StringVar(&u.states, "unique-states", "", "comma-separated states the job holds its key in (default: scheduled,pending,leased,running; every state with --unique-period)")
	return u
}

// build is the spec's unique options, nil when no flag asked for them.
func (u *uniqueFlags) build(fs *flag.FlagSet) (*jobwirev1.UniqueOptions, error) {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || strings.HasPrefix(f.Name, "unique") })
	if !given {
		return nil, nil
	}
	if flagGiven(fs, "unique") && !u.on {
		return nil, usageErrorf("--unique=false cannot be combined with the other --unique-* flags; leave them all out for a job that is not unique")
	}
	out := &jobwirev1.UniqueOptions{Key: u.key, ByPayload: u.byPayload, AcrossQueues: u.acrossQueues}
	if u.period < 0 {
		return nil, usageErrorf("--unique-period must not be negative")
	}
	if u.period > 0 {
		out.Period = durationpb.New(u.period)
	}
	for _, f := range splitList(u.fields) {
		out.Fields = append(out.Fields, f)
	}
	for _, s := range splitList(u.states) {
		st, err := parseState(s)
		if err != nil {
			return nil, err
		}
		out.States = append(out.States, st)
	}
	return out, nil
}

// splitList reads a comma-separated list, leaving out empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// uniqueKeyLine shows a job's unique key, shortened, with the states it holds it in.
func uniqueKeyLine(j *jobwirev1.Job) string {
	states := make([]string, len(j.GetUniqueStates()))
	for i, s := range j.GetUniqueStates() {
		states[i] = enumName(s)
	}
	key := j.GetUniqueKey()
	if len(key) > 16 {
		key = key[:16] + "..."
	}
	return display(key) + " while " + strings.Join(states, ", ")
}
