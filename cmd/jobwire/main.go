// Command jobwire runs the Jobwire broker (jobwire serve) and talks to a running one: enqueue
// jobs, inspect them, work the dead-letter queue, pause queues, read stats and steer circuit
// breakers. Run "jobwire help" for the list of commands.
//
// Exit status: 0 on success; 2 when the input was wrong, whether the command line itself (then
// nothing was sent) or what the broker rejected as INVALID_ARGUMENT; 1 when the broker refused or
// failed the request for any other reason, or could not be reached.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns the process exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr, getenv: os.Getenv, now: time.Now}
	return e.run(ctx, args)
}

// env is what a command may touch of the outside world; tests supply their own.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	now            func() time.Time
}

// usageError is bad input: a bad flag, a missing argument, input that fails local validation
// (then nothing has been sent to the broker), or input the broker rejected as INVALID_ARGUMENT.
// It is reported as one sentence and exits with status 2. Any command, including serve, returns
// one through usageErrorf.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// usageErrorf builds a *usageError; the text should be one sentence naming what was wrong.
func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// helpRequest is what parse returns when -h or --help is given: run prints the command's usage
// with these flags and exits 0.
type helpRequest struct{ fs *flag.FlagSet }

func (h *helpRequest) Error() string { return "help requested" }
func (h *helpRequest) Unwrap() error { return flag.ErrHelp }

// command is one entry of the command table. Grouped commands have two-word names ("dlq list").
type command struct {
	name    string
	args    string // synopsis after the name, e.g. "ID [flags]"
	summary string
	run     func(ctx context.Context, e *env, c *command, args []string) error
}

// commands is the command table, in the order "jobwire help" lists it.
var commands []*command

func init() {
	commands = []*command{
		{name: "serve", args: "[flags]", summary: "Run the broker.", run: runServe},
		{name: "migrate", args: "[--db DB] [flags]", summary: "Apply the database's pending migrations, without serving.", run: runMigrate},
		{name: "enqueue", args: "--type T [--payload JSON] [--unique-key K] [flags]", summary: "Enqueue one job and print its id.", run: runEnqueue},
		{name: "job get", args: "ID [flags]", summary: "Show a job with its attempt history.", run: runJobGet},
		{name: "job cancel", args: "ID [flags]", summary: "Cancel a job that has not finished.", run: runJobCancel},
		{name: "job run-now", args: "ID [flags]", summary: "Run a scheduled job now.", run: runJobRunNow},
		{name: "job retry-now", args: "ID [flags]", summary: "Retry now a job waiting out its retry backoff.", run: runJobRetryNow},
		{name: "job delete", args: "ID [flags]", summary: "Delete a pending or scheduled job.", run: runJobDelete},
		{name: "job priority", args: "ID PRIORITY [flags]", summary: "Change a pending or scheduled job's priority.", run: runJobPriority},
		{name: "graph enqueue", args: "FILE [flags]", summary: "Enqueue a graph of jobs from a JSON file in one call.", run: runGraphEnqueue},
		{name: "graph get", args: "ID [flags]", summary: "Show the jobs of a graph with their parents.", run: runGraphGet},
		{name: "graph cancel", args: "ID [flags]", summary: "Cancel every job of a graph that has not finished.", run: runGraphCancel},
		{name: "job wait", args: "ID... [--for D] [flags]", summary: "Wait until jobs are final; the exit status says how they ended.", run: runJobWait},
		{name: "job watch", args: "ID [--for D] [flags]", summary: "Follow a job's state and progress until it is final.", run: runJobWatch},
		{name: "jobs list", args: "[--state S] [--queue Q] [--type T] [--sort COLUMN [--asc]] [flags]", summary: "List jobs, newest first or sorted by a column.", run: runJobsList},
		{name: "dlq list", args: "[filters] [--sort COLUMN [--asc]] [flags]", summary: "List dead jobs, the newest death first or sorted by a column.", run: runDLQList},
		{name: "dlq show", args: "ID [flags]", summary: "Show a dead job's payload and every attempt's error.", run: runDLQShow},
		{name: "dlq requeue", args: "(ID... | --all-matching [filters]) [flags]", summary: "Send dead jobs back to run with their attempts reset.", run: runDLQRequeue},
		{name: "dlq purge", args: "(ID... | --all-matching [filters]) [flags]", summary: "Delete dead jobs for good.", run: runDLQPurge},
		{name: "dlq top", args: "[filters] [flags]", summary: "Group dead jobs by error type, largest group first.", run: runDLQTop},
		{name: "queues list", args: "[flags]", summary: "List queues with their depth, lag and limits.", run: runQueuesList},
		{name: "queues pause", args: "QUEUE [flags]", summary: "Stop dispatching a queue's jobs; running jobs finish.", run: runQueuesPause},
		{name: "queues resume", args: "QUEUE [flags]", summary: "Resume dispatching a paused queue.", run: runQueuesResume},
		{name: "queues set-limit", args: "QUEUE N [flags]", summary: "Cap a queue's running jobs across all workers (0 removes the cap).", run: runQueuesSetLimit},
		{name: "concurrency list", args: "[flags]", summary: "List the limits of running jobs per key, with how busy their keys are.", run: runConcurrencyList},
		{name: "concurrency set", args: "NAME --key EXPR --max-running N [--type T] [--queue Q] [flags]", summary: "Let at most N jobs of one key (a customer, say) run at once.", run: runConcurrencySet},
		{name: "concurrency remove", args: "NAME [flags]", summary: "Remove a limit of running jobs per key; its held jobs run.", run: runConcurrencyRemove},
		{name: "ratelimits list", args: "[flags]", summary: "List the rate limits with each one's allowance now.", run: runRateLimitsList},
		{name: "ratelimits set", args: "NAME N/INTERVAL [--burst N] [--type T] [--queue Q] [--key EXPR] [flags]", summary: "Allow at most N job starts per interval, across every broker.", run: runRateLimitsSet},
		{name: "ratelimits remove", args: "NAME [flags]", summary: "Remove a rate limit; the jobs it held back may start.", run: runRateLimitsRemove},
		{name: "stats", args: "[flags]", summary: "Show job counts, recent throughput and queue shapes.", run: runStats},
		{name: "breakers list", args: "[flags]", summary: "List the circuit breakers of job types.", run: runBreakersList},
		{name: "breakers reset", args: "TYPE [flags]", summary: "Close a job type's breaker and forget its failures.", run: runBreakersReset},
		{name: "breakers force", args: "TYPE (closed|open|half-open) [flags]", summary: "Put a job type's breaker in a state.", run: runBreakersForce},
		{name: "schedules list", args: "[flags]", summary: "List periodic schedules with their last and next fire times and last job.", run: runSchedulesList},
		{name: "schedules get", args: "NAME [flags]", summary: "Show one periodic schedule.", run: runSchedulesGet},
		{name: "schedules add", args: "NAME --cron C --type T [flags]", summary: "Declare a periodic schedule that enqueues a job at each of its times.", run: runSchedulesAdd},
		{name: "schedules update", args: "NAME [flags]", summary: "Change what the given flags say of a schedule; the rest stays.", run: runSchedulesUpdate},
		{name: "schedules remove", args: "NAME [flags]", summary: "Delete a schedule; the jobs it enqueued stay.", run: runSchedulesRemove},
		{name: "schedules pause", args: "NAME [--note TEXT] [flags]", summary: "Stop a schedule from firing, saying why.", run: runSchedulesPause},
		{name: "schedules resume", args: "NAME [flags]", summary: "Make a paused schedule fire again from its next time.", run: runSchedulesResume},
		{name: "schedules trigger", args: "NAME [flags]", summary: "Enqueue an occurrence of a schedule now and print its job id.", run: runSchedulesTrigger},
		{name: "schedules backfill", args: "NAME --from T --to T [flags]", summary: "Enqueue a schedule's occurrences in a past range that were never enqueued.", run: runSchedulesBackfill},
		{name: "tokens create", args: "--role R [--queues Q,...] [--types T,...] [--name N] [flags]", summary: "Create an API token and print it (shown only once).", run: runTokensCreate},
		{name: "tokens list", args: "[flags]", summary: "List API tokens without their secrets.", run: runTokensList},
		{name: "tokens revoke", args: "ID [flags]", summary: "Revoke an API token at once, closing the worker streams it opened.", run: runTokensRevoke},
		{name: "purge-succeeded", args: "--older-than D [flags]", summary: "Delete succeeded jobs that finished longer ago than D.", run: runPurgeSucceeded},
		{name: "workers", args: "[flags]", summary: "List the connected worker streams with their types, queues and slots.", run: runWorkers},
		{name: "brokers", args: "[flags]", summary: "List the brokers serving the database, with the leader and the one answering.", run: runBrokers},
		{name: "audit list", args: "[--action A] [--actor TOKEN] [--since D] [flags]", summary: "List who did which operator action, newest first.", run: runAuditList},
		{name: "batches list", args: "[--state S] [flags]", summary: "List batches with their counts, newest first.", run: runBatchesList},
		{name: "batches get", args: "ID [flags]", summary: "Show a batch: its counts, callbacks and failed jobs.", run: runBatchesGet},
		{name: "batches create", args: "[--on-success T] [--on-complete T] [flags]", summary: "Open a batch and print its id; add jobs with enqueue --batch.", run: runBatchesCreate},
		{name: "batches close", args: "ID [flags]", summary: "Close a batch: its callbacks run once its jobs are all final.", run: runBatchesClose},
		{name: "top", args: "[--interval D] [--count N] [flags]", summary: "Show throughput, queues and open breakers, redrawn every second.", run: runTop},
		{name: "version", args: "", summary: "Print the version.", run: runVersion},
		{name: "help", args: "[COMMAND]", summary: "Show this help, or one command's.", run: runHelp},
	}
}

// groups describes the command groups ("dlq", "queues", ...) for their help page. A group
// missing here still works; its help page then lists the subcommands without a heading line.
var groups = map[string]string{
	"job":         "Look at or cancel one job.",
	"jobs":        "List jobs, oldest first.",
	"graph":       "Enqueue, look at and cancel graphs of jobs that depend on one another.",
	"dlq":         "Work the dead-letter queue: list, inspect, requeue and purge dead jobs.",
	"queues":      "List queues, pause and resume them, cap how many of their jobs run at once.",
	"breakers":    "Look at and steer the circuit breakers of job types.",
	"concurrency": "Limit how many jobs of one key (a customer, say) run at once, across every broker.",
	"ratelimits":  "Limit how many jobs start per interval, per type, queue or key, across every broker.",
	"tokens":      "Create, list and revoke the API tokens of a broker with auth on.",
	"schedules":   "Declare periodic schedules, pause, resume, trigger and backfill them.",
	"audit":       "Read the audit trail of operator actions.",
	"batches":     "Group jobs in batches whose callbacks run once every job is final.",
}

// isHelpFlag reports whether arg asks for help.
func isHelpFlag(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// groupHelpRequest is what lookup returns for "jobwire dlq --help": run prints the group's
// page and exits 0.
type groupHelpRequest struct{ group string }

func (g *groupHelpRequest) Error() string { return "help requested for " + g.group }

// lookup finds the command named by the start of args and returns the remaining arguments.
func lookup(args []string) (*command, []string, error) {
	if len(args) >= 2 {
		if c := find(args[0] + " " + args[1]); c != nil {
			return c, args[2:], nil
		}
	}
	if c := find(args[0]); c != nil {
		return c, args[1:], nil
	}
	if subs := subcommands(args[0]); len(subs) > 0 {
		if len(args) > 1 && isHelpFlag(args[1]) {
			return nil, nil, &groupHelpRequest{group: args[0]}
		}
		if len(args) == 1 || strings.HasPrefix(args[1], "-") {
			return nil, nil, usageErrorf("%q needs a subcommand: %s (add --help for what each does)", args[0], strings.Join(subs, ", "))
		}
		if s := suggest(args[1], subs); s != "" {
			return nil, nil, usageErrorf("unknown command %q; did you mean %q?", args[0]+" "+args[1], args[0]+" "+s)
		}
		return nil, nil, usageErrorf("unknown command %q; %q has %s", args[0]+" "+args[1], args[0], strings.Join(subs, ", "))
	}
	if s := suggest(args[0], topLevelNames()); s != "" {
		return nil, nil, usageErrorf("unknown command %q; did you mean %q?", args[0], s)
	}
	return nil, nil, usageErrorf("unknown command %q; run 'jobwire help' for the list", args[0])
}

func find(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// subcommands lists the second words of the commands in a group such as "dlq".
func subcommands(group string) []string {
	var subs []string
	for _, c := range commands {
		if g, sub, ok := strings.Cut(c.name, " "); ok && g == group {
			subs = append(subs, sub)
		}
	}
	return subs
}

func (e *env) run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		printUsage(e.stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		printUsage(e.stdout)
		return 0
	case "-v", "-version", "--version":
		args = []string{"version"}
	}
	c, rest, err := lookup(args)
	if err == nil {
		err = c.run(ctx, e, c, rest)
	}
	var (
		ue *usageError
		hr *helpRequest
		gh *groupHelpRequest
		xs *exitStatus
	)
	switch {
	case errors.As(err, &xs):
		if xs.msg != "" {
			fmt.Fprintf(e.stderr, "jobwire %s: %s\n", c.name, xs.msg)
		}
		return xs.code
	case errors.As(err, &hr):
		printCommandUsage(e.stdout, c, hr.fs)
		return 0
	case errors.As(err, &gh):
		printGroupUsage(e.stdout, gh.group)
		return 0
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		name := "jobwire"
		if c != nil {
			name += " " + c.name
		}
		// Some inputs, a configuration file above all, can hold more than one mistake: each
		// is a sentence of its own, on its own line.
		for _, line := range strings.Split(ue.msg, "\n") {
			fmt.Fprintf(e.stderr, "%s: %s\n", name, line)
		}
		return 2
	default:
		name := "jobwire"
		if c != nil {
			name += " " + c.name
		}
		fmt.Fprintf(e.stderr, "%s: %v\n", name, err)
		return 1
	}
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `jobwire runs a Jobwire broker and operates a running one.

Usage:
  jobwire COMMAND [arguments] [flags]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-18s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Commands that talk to a broker take --addr (default $JOBWIRE_ADDR, else 127.0.0.1:7070),
--timeout (default 10s) and --json (print the response as JSON instead of a table; the shape
is stable, see docs/operating.md).
Flags may come before or after arguments. Durations take Go syntax (90s, 15m, 2h) or days (7d).

Exit status: 0 success; 2 the input was wrong (the command line, then nothing was sent, or what
the broker rejected as invalid); 1 the broker refused or failed the request for another reason,
or could not be reached.

Run 'jobwire help COMMAND' or 'jobwire COMMAND -h' for a command's flags.
`)
}

func runHelp(ctx context.Context, e *env, _ *command, args []string) error {
	if len(args) == 0 {
		printUsage(e.stdout)
		return nil
	}
	c, _, err := lookup(args)
	if len(args) == 1 && len(subcommands(args[0])) > 0 && c == nil {
		printGroupUsage(e.stdout, args[0])
		return nil
	}
	if err != nil {
		return err
	}
	if c.name == "help" || c.name == "version" {
		printCommandUsage(e.stdout, c, nil)
		return nil
	}
	err = c.run(ctx, e, c, []string{"-h"})
	var hr *helpRequest
	if errors.As(err, &hr) {
		printCommandUsage(e.stdout, c, hr.fs)
		return nil
	}
	return err
}

func runVersion(_ context.Context, e *env, c *command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("takes no arguments")
	}
	fmt.Fprintf(e.stdout, "jobwire %s\n", versionString())
	return nil
}

// flagsFor makes the FlagSet of a command. The flag package prints nothing: parse turns its
// errors into one usage sentence, and -h into a helpRequest.
func flagsFor(c *command) *flag.FlagSet {
	fs := flag.NewFlagSet("jobwire "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// printGroupUsage writes a group's help page: what it is for and its subcommands.
func printGroupUsage(w io.Writer, group string) {
	fmt.Fprintf(w, "Usage: jobwire %s SUBCOMMAND [arguments] [flags]\n\n", group)
	if summary := groups[group]; summary != "" {
		fmt.Fprintf(w, "%s\n\n", summary)
	}
	fmt.Fprint(w, "Subcommands:\n")
	for _, c := range commands {
		if g, sub, ok := strings.Cut(c.name, " "); ok && g == group {
			fmt.Fprintf(w, "  %-12s %s\n", sub, c.summary)
		}
	}
	fmt.Fprintf(w, "\nRun 'jobwire help %s SUBCOMMAND' or 'jobwire %s SUBCOMMAND -h' for a subcommand's flags.\n", group, group)
}

// printCommandUsage writes a command's synopsis and, when fs is given, its flags in the
// --name form the rest of the help uses.
func printCommandUsage(w io.Writer, c *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", strings.TrimSpace("jobwire "+c.name+" "+c.args), c.summary)
	if fs == nil {
		return
	}
	var flags []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f) })
	if len(flags) == 0 {
		return
	}
	fmt.Fprint(w, "\nFlags:\n")
	for _, f := range flags {
		kind, usage := flag.UnquoteUsage(f)
		if tv, ok := f.Value.(interface{ typeName() string }); ok {
			kind = tv.typeName()
		}
		head := "  --" + f.Name
		if kind != "" {
			head += " " + kind
		}
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
			usage += fmt.Sprintf(" (default %q)", f.DefValue)
		}
		fmt.Fprintf(w, "%s\n      %s\n", head, usage)
	}
}
