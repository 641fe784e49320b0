package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/job"
)

// brokerNames names brokers from..to (counting from 1) for descriptions: "broker 2",
// "brokers 2-3".
func brokerNames(from, to int) string {
	if from == to {
		return fmt.Sprintf("broker %d", from)
	}
	return fmt.Sprintf("brokers %d-%d", from, to)
}

// result is one scenario's measurement.
type result struct {
	Name        string  `json:"name"`
	Description string  `json:"description"`
	Jobs        int64   `json:"jobs"`
	Seconds     float64 `json:"seconds"`
	JobsPerSec  float64 `json:"jobs_per_sec"`
	// Latency is the enqueue-to-start latency in the latency scenario and the latency of one
	// Enqueue or EnqueueBatch call in the enqueue scenarios.
	Latency *latencyStats `json:"latency,omitempty"`
	Errors  int64         `json:"errors"`
	// BrokerCPUus is the CPU time the brokers spent over the measured part of the run, in
	// microseconds per job (0 where it cannot be read).
	BrokerCPUus float64 `json:"broker_cpu_us_per_job,omitempty"`
	// WorkerCPUus is the same for the worker processes, in the scenarios that run workers.
	WorkerCPUus float64 `json:"worker_cpu_us_per_job,omitempty"`
	// MachineCPUus is the same for the whole machine (readProcStat): every process on it,
	// this benchmark's producer and a local database included.
	MachineCPUus float64 `json:"machine_cpu_us_per_job,omitempty"`
	// WriterBusyPct is the share of the measured part of the run that the broker's writer
	// spent writing batches, in percent (the busiest broker's; 0 where it cannot be read:
	// metrics off).
	WriterBusyPct float64 `json:"writer_busy_pct,omitempty"`
	// BrokerRSSMiB is the peak resident memory of the scenario's broker (the largest of its
	// brokers), backlog included, in MiB (0 where it cannot be read).
	BrokerRSSMiB float64 `json:"broker_peak_rss_mib,omitempty"`
}

// bench holds what every scenario shares.
type bench struct {
	cfg benchConfig
	dir string
}

// runBench runs the selected scenarios, each on a fresh broker, and reports them.
func runBench(ctx context.Context, cfg benchConfig) error {
	dir, err := os.MkdirTemp("", "jobwire-bench-")
	if err != nil {
		return err
	}
	if cfg.keep {
		fmt.Fprintf(os.Stderr, "keeping databases and logs in %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	if cfg.profDir != "" {
		if err := os.MkdirAll(cfg.profDir, 0o755); err != nil {
			return err
		}
	} else if cfg.brokerBin == "" {
		fmt.Fprintln(os.Stderr, "building the broker...")
		if cfg.brokerBin, err = buildBroker(ctx, dir); err != nil {
			return err
		}
	}
	b := &bench{cfg: cfg, dir: dir}
	env := machineInfo()
	brokers := "1 broker"
	if cfg.Brokers > 1 {
		brokers = fmt.Sprintf("%d brokers on one database (producer calls spread over them, worker i on broker i mod %d)", cfg.Brokers, cfg.Brokers)
	}
	if cfg.Backlog > 0 {
		workers := "workers serve every queue"
		if cfg.namesDefaultQueue() {
			workers = fmt.Sprintf("workers take only %q", job.DefaultQueue)
		}
		where, how := fmt.Sprintf("in queue %q", backlogQueue), workers
		switch {
		case cfg.BacklogType:
			where, how = fmt.Sprintf("of type %q in queue %q", backlogType, job.DefaultQueue), "no worker handles it; "+workers
		case cfg.BacklogPaused:
			how = "paused; " + workers
		}
		brokers = fmt.Sprintf("%s, %d jobs waiting %s (%s)", brokers, cfg.Backlog, where, how)
	}
	if cfg.WorkerTypes > 1 {
		brokers = fmt.Sprintf("%s; each worker handles %d types", brokers, cfg.WorkerTypes)
	}
	fmt.Printf("jobwire-bench: %s, %d CPUs, %s, load average %s; %s store, durability %s; %s; %d worker processes x %d slots\n\n",
		env.CPU, env.CPUs, env.Go, env.LoadAvg, cfg.Store, cfg.Durability, brokers, cfg.Workers, cfg.Concurrency)
	printHeader()
	var results []result
	want := func(s string) bool { return slices.Contains(cfg.Scenarios, s) }
	type step struct {
		name string
		run  func(context.Context) ([]result, error)
	}
	steps := []step{
		{"enqueue-1", func(ctx context.Context) ([]result, error) {
			return b.onBroker(ctx, "enqueue-1", func(ctx context.Context, env *scenarioEnv) ([]result, error) {
				cpu := env.meterCPU()
				r, err := b.enqueueFor(ctx, env.client, 1, cfg.Producers)
				r.BrokerCPUus, r.MachineCPUus = cpu.perJob(r.Jobs)
				r.WriterBusyPct = cpu.writerBusy()
				return []result{r}, err
			})
		}},
		{"enqueue-100", func(ctx context.Context) ([]result, error) {
			return b.onBroker(ctx, "enqueue-100", func(ctx context.Context, env *scenarioEnv) ([]result, error) {
				cpu := env.meterCPU()
				r, err := b.enqueueFor(ctx, env.client, 100, cfg.BatchProds)
				r.BrokerCPUus, r.MachineCPUus = cpu.perJob(r.Jobs)
				r.WriterBusyPct = cpu.writerBusy()
				return []result{r}, err
			})
		}},
		{"drain", func(ctx context.Context) ([]result, error) {
			return b.onBroker(ctx, "drain", b.fillAndDrain(want("enqueue-1000"), want("drain")))
		}},
		{"drain-batch", func(ctx context.Context) ([]result, error) {
			return b.onBroker(ctx, "drain-batch", b.fillAndDrainBatch)
		}},
		{"e2e-1", func(ctx context.Context) ([]result, error) {
			return b.onBroker(ctx, "e2e-1", b.endToEnd(1, cfg.Producers))
		}},
		{"e2e-100", func(ctx context.Context) ([]result, error) {
			return b.onBroker(ctx, "e2e-100", b.endToEnd(100, cfg.BatchProds))
		}},
		{"latency", func(ctx context.Context) ([]result, error) {
			return b.onBroker(ctx, "latency", b.latency)
		}},
	}
	for _, s := range steps {
		if !want(s.name) && !(s.name == "drain" && want("enqueue-1000")) {
			continue
		}
		for range cfg.Repeat {
			rs, err := s.run(ctx)
			for _, r := range rs {
				printRow(r)
			}
			results = append(results, rs...)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
		}
	}
	if cfg.Repeat > 1 {
		fmt.Println()
		printSpread(results)
	}
	fmt.Println()
	if cfg.jsonPath != "" {
		if err := writeJSON(cfg.jsonPath, env, cfg, results); err != nil {
			return err
		}
		fmt.Printf("results written to %s\n", cfg.jsonPath)
	}
	return nil
}

// scenarioEnv is a scenario's running brokers (cfg.Brokers of them, on one database) with a
// producer client whose calls are spread over all of them.
type scenarioEnv struct {
	name    string
	brokers []*brokerProc
	client  *client.Client
}

// addrs lists the brokers' addresses.
func (e *scenarioEnv) addrs() []string {
	out := make([]string, len(e.brokers))
	for i, bp := range e.brokers {
		out[i] = bp.addr
	}
	return out
}

// onBroker runs fn against fresh brokers on a fresh database and stops them afterwards.
func (b *bench) onBroker(ctx context.Context, name string, fn func(context.Context, *scenarioEnv) ([]result, error)) ([]result, error) {
	db, drop, err := scenarioDB(ctx, &b.cfg, b.dir, name)
	if err != nil {
		return nil, err
	}
	env := &scenarioEnv{name: name}
	stop := func() error {
		var errs []error
		for _, bp := range env.brokers {
			if err := bp.stop(); err != nil {
				errs = append(errs, fmt.Errorf("broker: %w", err))
			}
		}
		return errors.Join(append(errs, drop())...)
	}
	for i := range b.cfg.Brokers {
		brokerName := name
		if b.cfg.Brokers > 1 {
			brokerName = fmt.Sprintf("%s-%d", name, i)
		}
		bp, err := startBroker(ctx, &b.cfg, b.dir, db, brokerName)
		if err != nil {
			return nil, errors.Join(err, stop())
		}
		env.brokers = append(env.brokers, bp)
	}
	dialCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	env.client, err = client.DialBrokers(dialCtx, env.addrs(), client.WithBlock(), client.WithEnqueueStreams(b.cfg.enqueueStreams(len(env.brokers))))
	cancel()
	if err != nil {
		return nil, errors.Join(err, stop())
	}
	if err := b.fillBacklog(ctx, env.client); err != nil {
		_ = env.client.Close()
		return nil, errors.Join(err, stop())
	}
	stopProfile, err := b.profileProducer(name)
	if err != nil {
		_ = env.client.Close()
		return nil, errors.Join(err, stop())
	}
	rs, err := fn(ctx, env)
	stopProfile()
	rss := env.brokerPeakRSS()
	for i := range rs {
		rs[i].BrokerRSSMiB = rss
	}
	_ = env.client.Close()
	if stopErr := stop(); stopErr != nil && err == nil {
		err = stopErr
	}
	return rs, err
}

// waitLimit bounds every wait for jobs: generous for the slowest broker worth measuring, so a
// broken one fails the run instead of hanging it.
func (b *bench) waitLimit(jobs int) time.Duration {
	return time.Minute + time.Duration(jobs)*time.Millisecond
}

// enqueueFor enqueues batch jobs a call from producers goroutines for cfg.Duration.
func (b *bench) enqueueFor(ctx context.Context, c *client.Client, batch, producers int) (result, error) {
	name := fmt.Sprintf("enqueue-%d", batch)
	desc := fmt.Sprintf("Enqueue x%d goroutines", producers)
	if batch > 1 {
		desc = fmt.Sprintf("EnqueueBatch(%d) x%d goroutines", batch, producers)
	}
	// Calls run with the caller's context and stop being made once the time is up, so the
	// last calls finish normally instead of failing on a deadline.
	var stop atomic.Bool
	timer := time.AfterFunc(b.cfg.Duration, func() { stop.Store(true) })
	defer timer.Stop()
	var jobs, errs atomic.Int64
	calls := make([][]int64, producers)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range producers {
		wg.Go(func() {
			for !stop.Load() && ctx.Err() == nil {
				t0 := time.Now()
				if err := enqueue(ctx, c, batch, false); err != nil {
					if ctx.Err() == nil {
						noteError(&errs, err)
						time.Sleep(10 * time.Millisecond) // a failing broker: do not spin
					}
					continue
				}
				jobs.Add(int64(batch))
				calls[i] = append(calls[i], int64(time.Since(t0)))
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	return result{Name: name, Description: desc, Jobs: jobs.Load(), Seconds: el.Seconds(),
		JobsPerSec: float64(jobs.Load()) / el.Seconds(), Latency: summarize(slices.Concat(calls...)), Errors: errs.Load()}, nil
}

// enqueue enqueues n no-op jobs in one call (Enqueue for 1, EnqueueBatch otherwise).
func enqueue(ctx context.Context, c *client.Client, n int, measure bool) error {
	if n == 1 {
		_, err := c.Enqueue(ctx, jobType, makePayload(time.Now(), measure))
		return err
	}
	specs := make([]client.JobSpec, n)
	now := time.Now()
	for i := range specs {
		specs[i] = client.JobSpec{Type: jobType, Payload: makePayload(now, measure)}
	}
	_, err := c.EnqueueBatch(ctx, specs)
	return err
}

// noteError counts a failed call and prints the first few, so a benchmark that hits errors
// says which.
func noteError(n *atomic.Int64, err error) {
	if n.Add(1) <= 3 {
		fmt.Fprintln(os.Stderr, "jobwire-bench: call failed:", err)
	}
}

// enqueueN enqueues total jobs, batch a call, from producers goroutines, retrying failed calls
// so that exactly total jobs are stored. It reports failed calls.
func enqueueN(ctx context.Context, c *client.Client, total, batch, producers int) (int64, error) {
	var next atomic.Int64
	var errs atomic.Int64
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			for {
				from := next.Add(int64(batch)) - int64(batch)
				if from >= int64(total) || ctx.Err() != nil {
					return
				}
				n := min(batch, total-int(from))
				for {
					err := enqueue(ctx, c, n, false)
					if err == nil {
						break
					}
					if ctx.Err() != nil {
						return
					}
					noteError(&errs, err)
					time.Sleep(10 * time.Millisecond) // a failing broker: do not spin
				}
			}
		})
	}
	wg.Wait()
	return errs.Load(), ctx.Err()
}

// fillAndDrain enqueues cfg.Jobs jobs in batches of 1000 with no worker connected, then starts
// the workers and times how long they take to run every job.
func (b *bench) fillAndDrain(reportFill, drain bool) func(context.Context, *scenarioEnv) ([]result, error) {
	return func(ctx context.Context, env *scenarioEnv) ([]result, error) {
		var out []result
		waitCtx, cancel := context.WithTimeout(ctx, b.waitLimit(b.cfg.Jobs))
		defer cancel()
		cpu, start := env.meterCPU(), time.Now()
		errs, err := enqueueN(waitCtx, env.client, b.cfg.Jobs, 1000, b.cfg.BatchProds)
		if err != nil {
			return nil, err
		}
		el := time.Since(start)
		if reportFill {
			r := result{Name: "enqueue-1000", Description: fmt.Sprintf("EnqueueBatch(1000) x%d goroutines", b.cfg.BatchProds),
				Jobs: int64(b.cfg.Jobs), Seconds: el.Seconds(), JobsPerSec: float64(b.cfg.Jobs) / el.Seconds(), Errors: errs}
			r.BrokerCPUus, r.MachineCPUus = cpu.perJob(r.Jobs)
			r.WriterBusyPct = cpu.writerBusy()
			out = append(out, r)
		}
		if !drain {
			return out, nil
		}
		external := b.cfg.WorkerCmd != ""
		desc := fmt.Sprintf("%d queued, then %d Go workers x%d", b.cfg.Jobs, b.cfg.Workers, b.cfg.Concurrency)
		if external {
			desc = fmt.Sprintf("%d queued, then %d x --worker-cmd", b.cfg.Jobs, b.cfg.Workers)
		}
		cpu, start = env.meterCPU(), time.Now()
		f, err := startFleet(&b.cfg, b.dir, env.addrs(), fleetSpec{scenario: env.name, external: external}, env.client)
		if err != nil {
			return out, err
		}
		end, err := f.waitAcked(waitCtx, int64(b.cfg.Jobs))
		if err != nil {
			f.kill()
			return out, err
		}
		drainCPU, drainMachine := cpu.perJob(int64(b.cfg.Jobs))
		drainWriter := cpu.writerBusy()
		workerCPU, workerOK := f.workerCPU()
		if _, err := f.stop(); err != nil {
			return out, err
		}
		el = end.Sub(start)
		out = append(out, result{Name: "drain", Description: desc, Jobs: int64(b.cfg.Jobs), Seconds: el.Seconds(),
			JobsPerSec: float64(b.cfg.Jobs) / el.Seconds(), BrokerCPUus: drainCPU, MachineCPUus: drainMachine,
			WriterBusyPct: drainWriter, WorkerCPUus: usPerJob(workerCPU, workerOK, int64(b.cfg.Jobs))})
		return out, checkSucceeded(ctx, env.client, int64(b.cfg.Backlog), int64(b.cfg.Jobs))
	}
}

// checkSucceeded spot-checks that jobs 1..n (ids count from 1 in a fresh database) ended
// SUCCEEDED, so a benchmark of a broker that loses or fails jobs cannot look good. The
// backlog's jobs (--backlog) come first and must still be PENDING: ids are counted after them,
// and one of the backlog's met there (brokers that draw ids in blocks interleave them) is
// checked as such.
func checkSucceeded(ctx context.Context, c *client.Client, backlog, n int64) error {
	for _, id := range []int64{1, n / 3, n / 2, n - 1, n} {
		if id < 1 {
			continue
		}
		id += backlog
		j, err := c.Get(ctx, id)
		if err != nil {
			return fmt.Errorf("check job %d: %w", id, err)
		}
		if j.Queue == backlogQueue || j.Type == backlogType {
			if j.State != job.StatePending {
				return fmt.Errorf("job %d of the backlog is %s, want PENDING", id, j.State)
			}
			continue
		}
		if j.State != job.StateSucceeded {
			return fmt.Errorf("job %d is %s, want SUCCEEDED", id, j.State)
		}
	}
	return nil
}

// endToEnd starts the workers, waits until they are connected, then enqueues cfg.E2EJobs jobs
// (batch a call) and times until every job succeeded.
func (b *bench) endToEnd(batch, producers int) func(context.Context, *scenarioEnv) ([]result, error) {
	return func(ctx context.Context, env *scenarioEnv) ([]result, error) {
		waitCtx, cancel := context.WithTimeout(ctx, b.waitLimit(b.cfg.E2EJobs))
		defer cancel()
		f, err := startFleet(&b.cfg, b.dir, env.addrs(), fleetSpec{scenario: env.name}, env.client)
		if err != nil {
			return nil, err
		}
		if err := f.waitReady(waitCtx); err != nil {
			f.kill()
			return nil, err
		}
		cpu, start := env.meterCPU(), time.Now()
		workerCPU := f.meterWorkers()
		errs, err := enqueueN(waitCtx, env.client, b.cfg.E2EJobs, batch, producers)
		if err != nil {
			f.kill()
			return nil, err
		}
		end, err := f.waitAcked(waitCtx, int64(b.cfg.E2EJobs))
		if err != nil {
			f.kill()
			return nil, err
		}
		e2eCPU, e2eMachine := cpu.perJob(int64(b.cfg.E2EJobs))
		e2eWriter := cpu.writerBusy()
		e2eWorkers := workerCPU(int64(b.cfg.E2EJobs))
		if _, err := f.stop(); err != nil {
			return nil, err
		}
		el := end.Sub(start)
		how := fmt.Sprintf("Enqueue x%d", producers)
		if batch > 1 {
			how = fmt.Sprintf("EnqueueBatch(%d) x%d", batch, producers)
		}
		r := result{Name: fmt.Sprintf("e2e-%d", batch), Jobs: int64(b.cfg.E2EJobs), Seconds: el.Seconds(),
			JobsPerSec: float64(b.cfg.E2EJobs) / el.Seconds(), Errors: errs, BrokerCPUus: e2eCPU, MachineCPUus: e2eMachine, WriterBusyPct: e2eWriter,
			WorkerCPUus: e2eWorkers,
			Description: fmt.Sprintf("%s while %d workers x%d run", how, b.cfg.Workers, b.cfg.Concurrency)}
		return []result{r}, checkSucceeded(ctx, env.client, int64(b.cfg.Backlog), int64(b.cfg.E2EJobs))
	}
}

// latency runs an open-loop producer at cfg.Rate jobs/s: job i is enqueued at start + i/rate
// whether or not earlier calls have returned, so a slow broker cannot slow the producer down
// and hide its own latency. Workers record start time minus the time taken just before the
// Enqueue call.
func (b *bench) latency(ctx context.Context, env *scenarioEnv) ([]result, error) {
	total := int(b.cfg.LatencyFor.Seconds() * float64(b.cfg.Rate))
	waitCtx, cancel := context.WithTimeout(ctx, b.cfg.LatencyFor+b.waitLimit(total))
	defer cancel()
	// With several brokers the producer sends to the first and the workers take from the
	// others, so every sample crosses from one broker to another.
	producer, workerAddrs, where := env.client, env.addrs(), ""
	if len(env.brokers) > 1 {
		dialCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := client.Dial(dialCtx, env.brokers[0].addr, client.WithBlock(), client.WithEnqueueStreams(b.cfg.enqueueStreams(1)))
		cancel()
		if err != nil {
			return nil, err
		}
		defer c.Close()
		producer, workerAddrs = c, workerAddrs[1:]
		where = fmt.Sprintf(", producer on broker 1, workers on %s", brokerNames(2, len(env.brokers)))
	}
	f, err := startFleet(&b.cfg, b.dir, workerAddrs, fleetSpec{scenario: env.name, latency: true}, env.client)
	if err != nil {
		return nil, err
	}
	if err := f.waitReady(waitCtx); err != nil {
		f.kill()
		return nil, err
	}
	interval := time.Second / time.Duration(b.cfg.Rate)
	var errs atomic.Int64
	var wg sync.WaitGroup
	cpu := env.meterCPU()
	workerCPU := f.meterWorkers()
	start := time.Now()
	for i := range total {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			select {
			case <-time.After(d):
			case <-waitCtx.Done():
				f.kill()
				return nil, context.Cause(waitCtx)
			}
		}
		measure := due.Sub(start) >= b.cfg.Warmup
		wg.Go(func() {
			if err := enqueue(waitCtx, producer, 1, measure); err != nil {
				noteError(&errs, err)
			}
		})
	}
	wg.Wait()
	produced := time.Since(start)
	want := int64(total) - errs.Load()
	if _, err := f.waitAcked(waitCtx, want); err != nil {
		f.kill()
		return nil, err
	}
	brokerCPU, machine := cpu.perJob(int64(total))
	writer := cpu.writerBusy()
	workers := workerCPU(int64(total))
	samples, err := f.stop()
	if err != nil {
		return nil, err
	}
	r := result{Name: "latency", Jobs: int64(total), Seconds: produced.Seconds(), JobsPerSec: float64(total) / produced.Seconds(),
		Latency: summarize(samples), Errors: errs.Load(), BrokerCPUus: brokerCPU, MachineCPUus: machine, WriterBusyPct: writer,
		WorkerCPUus: workers,
		Description: fmt.Sprintf("open loop %d/s, enqueue-to-start, %d workers x%d%s", b.cfg.Rate, b.cfg.Workers, b.cfg.Concurrency, where)}
	return []result{r}, nil
}

// profileProducer starts a CPU profile of this process, the producer's (and the latency
// scenario's receiving end), as producer-NAME.pprof beside the broker's and the workers', when
// profiles are asked for; the returned func stops it (startProfiles).
func (b *bench) profileProducer(name string) (func(), error) {
	if b.cfg.profDir == "" {
		return func() {}, nil
	}
	return startProfiles(filepath.Join(b.cfg.profDir, "producer-"+name+".pprof"))
}

// startProfiles starts a CPU profile of this process into path. The returned func stops it and
// writes the allocation profile beside it (NAME.allocs.pprof beside NAME.pprof): every
// allocation sampled since the process started, so the broker's and each worker's cover their
// one scenario, and the producer's every scenario run so far (go tool pprof -base takes the one
// before out).
func startProfiles(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
		if err := writeAllocs(strings.TrimSuffix(path, ".pprof") + ".allocs.pprof"); err != nil {
			fmt.Fprintln(os.Stderr, "jobwire-bench:", err)
		}
	}, nil
}

// writeAllocs writes the process's allocation profile to path.
func writeAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
