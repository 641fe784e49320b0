package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/store/postgres"
)

// benchConfig is what one benchmark run measures and how.
type benchConfig struct {
	Scenarios   []string `json:"scenarios"`
	Jobs        int      `json:"jobs"`
	E2EJobs     int      `json:"e2e_jobs"`
	Workers     int      `json:"workers"`
	Concurrency int      `json:"concurrency"`
	Producers   int      `json:"producers"`
	// EnqueueStreams is the producer's client.WithEnqueueStreams (0: a call per job; below 0:
	// the client's default, streams with one broker as Dial makes, calls with several as
	// DialBrokers makes).
	EnqueueStreams int           `json:"enqueue_streams,omitempty"`
	BatchProds     int           `json:"batch_producers"`
	Duration       time.Duration `json:"duration_ns"`
	Rate           int           `json:"rate"`
	LatencyFor     time.Duration `json:"latency_duration_ns"`
	Warmup         time.Duration `json:"latency_warmup_ns"`
	Durability     string        `json:"durability"`
	Repeat         int           `json:"repeat"`
	Metrics        string        `json:"metrics"`
	WorkerCmd      string        `json:"worker_cmd,omitempty"`
	// Postgres is the database URL the brokers run on, each scenario in a fresh schema; ""
	// runs each on a fresh SQLite file.
	Postgres string `json:"-"`
	Store    string `json:"store"`
	// Brokers is how many brokers each scenario starts on its database (PostgreSQL only).
	Brokers int `json:"brokers"`
	// Backlog is how many jobs each scenario first queues in backlogQueue, which its workers
	// do not serve: the scenario then runs beside that many waiting jobs.
	Backlog int `json:"backlog,omitempty"`
	// BacklogPaused pauses backlogQueue instead of having the workers name the default queue:
	// the workers then serve every queue, as a worker configured with none does.
	BacklogPaused bool `json:"backlog_paused,omitempty"`
	// BacklogType queues the backlog in the default queue as jobs of backlogType, which no
	// worker handles, instead of in backlogQueue: the workers serve every queue.
	BacklogType bool `json:"backlog_type,omitempty"`
	// BacklogNamed, with BacklogType, has the workers name the default queue, as they do
	// beside a backlog in backlogQueue, instead of serving every queue.
	BacklogNamed bool `json:"backlog_named,omitempty"`
	// WorkerTypes is how many types each Go SDK worker handles: the scenarios' type and
	// WorkerTypes-1 more that no job has, so that its leases are leases of several types.
	WorkerTypes int `json:"worker_types,omitempty"`

	jsonPath  string
	brokerBin string
	profDir   string
	keep      bool
}

// allScenarios lists every scenario in the order they run.
var allScenarios = []string{"enqueue-1", "enqueue-100", "enqueue-1000", "drain", "drain-batch", "e2e-1", "e2e-100", "latency"}

const usage = `Usage: jobwire-bench [flags]
       jobwire-bench compare|breakdown|floor|machine-cpu ... (each with -h)

Runs the end-to-end benchmark: a fresh broker process per scenario, worker processes running the
Go worker SDK with no-op handlers (or --worker-cmd), and this process as the producer. compare
runs it against another commit's, breakdown times one enqueue stage by stage, floor measures
what a lone job cannot cost less than here, machine-cpu the whole machine's CPU a job of any
benchmark's results.

Flags:
`

func parseFlags(args []string) (benchConfig, error) {
	c := benchConfig{}
	fs := flag.NewFlagSet("jobwire-bench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	scen := fs.String("scenarios", strings.Join(allScenarios, ","), "comma-separated scenarios to run")
	fs.IntVar(&c.Jobs, "jobs", 100_000, "jobs of the enqueue-1000 and drain scenarios")
	fs.IntVar(&c.E2EJobs, "e2e-jobs", 50_000, "jobs of each e2e scenario")
	fs.IntVar(&c.Workers, "workers", 2, "worker processes")
	fs.IntVar(&c.Concurrency, "concurrency", 256, "handler slots (the capacity announced to the broker) per worker process")
	fs.IntVar(&c.Producers, "producers", 64, "concurrent producer goroutines for one-job enqueues")
	fs.IntVar(&c.BatchProds, "batch-producers", 4, "concurrent producer goroutines for batch enqueues")
	fs.IntVar(&c.EnqueueStreams, "enqueue-streams", -1, "send one-job enqueues on up to this many streams (the Go client's WithEnqueueStreams); 0: a call per job; -1: the client's default (streams with one broker, calls with several)")
	fs.DurationVar(&c.Duration, "duration", 5*time.Second, "how long each enqueue-only scenario runs")
	fs.IntVar(&c.Rate, "rate", 1000, "jobs per second of the latency scenario's open-loop producer")
	fs.DurationVar(&c.LatencyFor, "latency-duration", 10*time.Second, "how long the latency scenario produces")
	fs.DurationVar(&c.Warmup, "warmup", time.Second, "latency samples from this first part of the run are not counted")
	fs.IntVar(&c.Repeat, "repeat", 1, "run each selected scenario this many times, each on a fresh broker, and print the spread")
	fs.StringVar(&c.Durability, "durability", "normal", "broker durability: normal (synchronous=NORMAL) or full (synchronous=FULL)")
	fs.StringVar(&c.Metrics, "metrics", "on", "broker Prometheus metrics: on or off (to measure what they cost)")
	fs.StringVar(&c.WorkerCmd, "worker-cmd", "", "run the drain scenario with this shell command as each worker process instead of the Go SDK worker (see docs/performance.md)")
	quick := fs.Bool("quick", false, "a small, fast run: 10,000 jobs to drain, 5,000 per e2e scenario, 2s enqueue scenarios, 3s latency")
	fs.StringVar(&c.Postgres, "db", "", "run the brokers on this PostgreSQL database (a postgres:// URL), each scenario in a fresh schema, instead of a fresh SQLite file each")
	fs.IntVar(&c.Brokers, "brokers", 1, "brokers per scenario, all on its database (above 1 needs --db): producer calls are spread over them, worker i takes from broker i mod N, and in the latency scenario the producer sends to the first while the workers take from the others")
	fs.IntVar(&c.Backlog, "backlog", 0, "first queue this many jobs in the queue \""+backlogQueue+"\", which no worker serves (the workers then take only the default queue), so each scenario runs beside a backlog")
	fs.BoolVar(&c.BacklogPaused, "backlog-paused", false, "with --backlog: pause the backlog's queue, and let the workers serve every queue, instead of having them take only the default queue")
	fs.BoolVar(&c.BacklogNamed, "backlog-named", false, "with --backlog-type: the workers name the default queue, where the backlog waits, instead of serving every queue")
	fs.BoolVar(&c.BacklogType, "backlog-type", false, "with --backlog: queue the backlog in the default queue as jobs of the type \""+backlogType+"\", which no worker handles, and let the workers serve every queue")
	fs.IntVar(&c.WorkerTypes, "worker-types", 1, "each Go SDK worker handles this many types: the scenarios' own and the rest with no job, so that its leases are leases of several types (as a worker with several handlers)")
	fs.StringVar(&c.jsonPath, "json", "", "also write the results as JSON to this file")
	fs.StringVar(&c.brokerBin, "broker-bin", "", "use this jobwire binary instead of building ./cmd/jobwire")
	fs.StringVar(&c.profDir, "cpuprofile", "", "write CPU and allocation profiles of the broker, the workers and the producer of every scenario into this directory (NAME.pprof, NAME.allocs.pprof; the broker then runs from this binary)")
	fs.BoolVar(&c.keep, "keep", false, "keep the temporary directory (SQLite databases, broker logs) and, with --db, each scenario's schema")
	if err := parseCommandLine(fs, args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "jobwire-bench: unexpected argument %q\n", fs.Arg(0))
		return c, errUsage
	}
	if *quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["jobs"] {
			c.Jobs = 10_000
		}
		if !set["e2e-jobs"] {
			c.E2EJobs = 5_000
		}
		if !set["duration"] {
			c.Duration = 2 * time.Second
		}
		if !set["latency-duration"] {
			c.LatencyFor = 3 * time.Second
		}
		if !set["warmup"] {
			c.Warmup = 500 * time.Millisecond
		}
	}
	for _, s := range strings.Split(*scen, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !slices.Contains(allScenarios, s) {
			return c, fmt.Errorf("unknown scenario %q (have %s)", s, strings.Join(allScenarios, ", "))
		}
		c.Scenarios = append(c.Scenarios, s)
	}
	var errs []string
	c.Store = "sqlite"
	if c.Postgres != "" {
		c.Store = "postgres"
		if !postgres.IsURL(c.Postgres) {
			errs = append(errs, fmt.Sprintf("--db must be a postgres:// URL, got %q", postgres.Redact(c.Postgres)))
		}
	}
	if c.Brokers > 1 && c.Postgres == "" {
		errs = append(errs, fmt.Sprintf("--brokers %d needs --db postgres://...: only a PostgreSQL database can be shared by brokers", c.Brokers))
	}
	if c.Durability != "normal" && c.Durability != "full" {
		errs = append(errs, fmt.Sprintf("--durability must be normal or full, got %q", c.Durability))
	}
	if c.Backlog < 0 {
		errs = append(errs, fmt.Sprintf("--backlog must not be negative, got %d", c.Backlog))
	}
	if c.BacklogPaused && c.Backlog == 0 {
		errs = append(errs, "--backlog-paused needs --backlog N")
	}
	if c.BacklogType && c.Backlog == 0 {
		errs = append(errs, "--backlog-type needs --backlog N")
	}
	if c.BacklogNamed && !c.BacklogType {
		errs = append(errs, "--backlog-named needs --backlog-type")
	}
	if c.BacklogType && c.BacklogPaused {
		errs = append(errs, "--backlog-type and --backlog-paused cannot be combined: the one queues the backlog in the default queue, the other pauses its own")
	}
	if c.Backlog > 0 && c.WorkerCmd != "" {
		errs = append(errs, "--backlog cannot be combined with --worker-cmd: such workers serve every queue, the backlog's too")
	}
	if c.WorkerTypes < 1 {
		errs = append(errs, fmt.Sprintf("--worker-types must be at least 1, got %d", c.WorkerTypes))
	}
	if c.WorkerTypes > 1 && c.WorkerCmd != "" {
		errs = append(errs, "--worker-types cannot be combined with --worker-cmd: such workers handle the types they were written for")
	}
	if c.EnqueueStreams < -1 {
		errs = append(errs, fmt.Sprintf("--enqueue-streams must be -1 (the client's default) or more, got %d", c.EnqueueStreams))
	}
	if c.Metrics != "on" && c.Metrics != "off" {
		errs = append(errs, fmt.Sprintf("--metrics must be on or off, got %q", c.Metrics))
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"jobs", c.Jobs}, {"e2e-jobs", c.E2EJobs}, {"workers", c.Workers}, {"concurrency", c.Concurrency}, {"producers", c.Producers},
		{"batch-producers", c.BatchProds}, {"rate", c.Rate}, {"repeat", c.Repeat}, {"brokers", c.Brokers}} {
		if p.v < 1 {
			errs = append(errs, fmt.Sprintf("--%s must be at least 1, got %d", p.name, p.v))
		}
	}
	if c.Duration <= 0 || c.LatencyFor <= 0 {
		errs = append(errs, "--duration and --latency-duration must be positive")
	}
	if c.Warmup < 0 || c.Warmup >= c.LatencyFor {
		errs = append(errs, "--warmup must be shorter than --latency-duration")
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return c, nil
}

// enqueueStreams is the producer's enqueue streams with brokers brokers: --enqueue-streams, or
// what the client does by default, dialed as a user would (Dial for one broker, DialBrokers
// for several).
func (c *benchConfig) enqueueStreams(brokers int) int {
	switch {
	case c.EnqueueStreams >= 0:
		return c.EnqueueStreams
	case brokers == 1:
		return client.DefaultEnqueueStreams
	default:
		return 0
	}
}
