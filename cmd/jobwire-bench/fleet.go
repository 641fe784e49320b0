package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/job"
)

// fleet is the set of worker processes of one scenario.
type fleet struct {
	procs []*workerProc
	// external workers do not report; progress is read from the broker's counts instead.
	external bool
	admin    *client.Client

	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever a worker reports
}

// workerProc is one worker process.
type workerProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	log   string

	// Guarded by the fleet's mu.
	ready   bool
	acked   int64
	lastAck int64 // Unix nanoseconds
	samples []int64
	bye     bool
	exited  chan error
}

// fleetSpec says which workers to start.
type fleetSpec struct {
	scenario string
	latency  bool // record enqueue-to-start latency
	external bool // run --worker-cmd instead of the built-in worker
}

// startFleet starts cfg.Workers worker processes, worker i on the broker at addrs[i mod
// len(addrs)].
func startFleet(cfg *benchConfig, dir string, addrs []string, spec fleetSpec, admin *client.Client) (*fleet, error) {
	f := &fleet{external: spec.external, admin: admin, changed: make(chan struct{})}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	for i := range cfg.Workers {
		id := fmt.Sprintf("bench-%s-%d", spec.scenario, i)
		addr := addrs[i%len(addrs)]
		var cmd *exec.Cmd
		if spec.external {
			cmd = exec.Command("sh", "-c", cfg.WorkerCmd)
			cmd.Env = append(os.Environ(), "JOBWIRE_ADDR="+addr, "JOBWIRE_WORKER_ID="+id,
				"JOBWIRE_CONCURRENCY="+strconv.Itoa(cfg.Concurrency))
			// Its own process group, so stopping reaches whatever the shell started.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		} else {
			args := []string{workerCommand, "--addr", addr, "--id", id, "--concurrency", strconv.Itoa(cfg.Concurrency)}
			if spec.latency {
				args = append(args, "--latency")
			}
			if cfg.WorkerTypes > 1 {
				args = append(args, "--types", strconv.Itoa(cfg.WorkerTypes))
			}
			if cfg.namesDefaultQueue() {
				// Named, so the backlog's queue is left to wait.
				args = append(args, "--queue", job.DefaultQueue)
			}
			if cfg.profDir != "" {
				args = append(args, "--cpuprofile", filepath.Join(cfg.profDir, id+".pprof"))
			}
			cmd = exec.Command(self, args...)
		}
		p := &workerProc{cmd: cmd, log: filepath.Join(dir, id+".log"), exited: make(chan error, 1)}
		if err := f.start(p); err != nil {
			f.kill()
			return nil, err
		}
		f.procs = append(f.procs, p)
	}
	return f, nil
}

func (f *fleet) start(p *workerProc) error {
	logFile, err := os.Create(p.log)
	if err != nil {
		return err
	}
	p.cmd.Stderr = logFile
	var stdout io.ReadCloser
	if f.external {
		p.cmd.Stdout = logFile
	} else {
		if stdout, err = p.cmd.StdoutPipe(); err != nil {
			_ = logFile.Close()
			return err
		}
		if p.stdin, err = p.cmd.StdinPipe(); err != nil {
			_ = logFile.Close()
			return err
		}
	}
	if err := p.cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("start worker: %w", err)
	}
	go func() {
		if stdout != nil {
			f.read(p, stdout)
		}
		err := p.cmd.Wait()
		_ = logFile.Close()
		p.exited <- err
		f.notify()
	}()
	return nil
}

// read applies a worker's report lines.
func (f *fleet) read(p *workerProc, r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 256*1024*1024)
	for sc.Scan() {
		kind, rest, _ := strings.Cut(sc.Text(), " ")
		f.mu.Lock()
		switch kind {
		case msgReady:
			p.ready = true
		case msgAcked:
			var n, at int64
			if _, err := fmt.Sscan(rest, &n, &at); err == nil {
				p.acked, p.lastAck = n, at
			}
		case msgLatency:
			_ = json.Unmarshal([]byte(rest), &p.samples)
		case msgBye:
			p.bye = true
		}
		f.mu.Unlock()
		f.notify()
	}
}

func (f *fleet) notify() {
	f.mu.Lock()
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

// waitFor waits until cond holds over the fleet's reports (checked under mu), ctx ends, or a
// worker exits unexpectedly.
func (f *fleet) waitFor(ctx context.Context, what string, cond func() bool) error {
	for {
		f.mu.Lock()
		ok := cond()
		changed := f.changed
		f.mu.Unlock()
		if ok {
			return nil
		}
		for _, p := range f.procs {
			select {
			case err := <-p.exited:
				p.exited <- err
				return fmt.Errorf("waiting for %s: a worker exited (%v); see %s", what, err, p.log)
			default:
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, context.Cause(ctx))
		}
	}
}

// waitReady waits until every worker's stream was welcomed. External workers do not say, so
// for them it returns at once.
func (f *fleet) waitReady(ctx context.Context) error {
	if f.external {
		return nil
	}
	return f.waitFor(ctx, "workers to connect", func() bool {
		for _, p := range f.procs {
			if !p.ready {
				return false
			}
		}
		return true
	})
}

// waitAcked waits until n jobs have succeeded and returns when the last of them was
// acknowledged.
func (f *fleet) waitAcked(ctx context.Context, n int64) (time.Time, error) {
	if f.external {
		return f.pollSucceeded(ctx, n)
	}
	var last int64
	err := f.waitFor(ctx, fmt.Sprintf("%d jobs to succeed", n), func() bool {
		var total int64
		last = 0
		for _, p := range f.procs {
			total += p.acked
			last = max(last, p.lastAck)
		}
		return total >= n
	})
	return time.Unix(0, last), err
}

// pollSucceeded reads the broker's counts until n jobs of the benchmark's type succeeded. It
// is how a drain by external workers is timed, to within the polling interval.
func (f *fleet) pollSucceeded(ctx context.Context, n int64) (time.Time, error) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := f.admin.GetStats(ctx)
		if err != nil {
			return time.Time{}, fmt.Errorf("read the broker's counts to follow external workers: %w", err)
		}
		var done int64
		for _, c := range st.Counts {
			if c.Type == jobType && c.State == job.StateSucceeded {
				done += c.Count
			}
		}
		if done >= n {
			return time.Now(), nil
		}
		for _, p := range f.procs {
			select {
			case err := <-p.exited:
				p.exited <- err
				return time.Time{}, fmt.Errorf("an external worker exited (%v); see %s", err, p.log)
			default:
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return time.Time{}, context.Cause(ctx)
		}
	}
}

// stop stops every worker gracefully and returns the latency samples they recorded.
func (f *fleet) stop() ([]int64, error) {
	for _, p := range f.procs {
		if f.external {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		} else {
			_ = p.stdin.Close()
		}
	}
	var errs []error
	deadline := time.After(30 * time.Second)
	for _, p := range f.procs {
		select {
		case err := <-p.exited:
			if err != nil && !f.external {
				errs = append(errs, fmt.Errorf("worker: %w; see %s", err, p.log))
			}
		case <-deadline:
			f.kill()
			return nil, errors.Join(append(errs, errors.New("workers did not stop within 30s; killed"))...)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var samples []int64
	for _, p := range f.procs {
		samples = append(samples, p.samples...)
	}
	return samples, errors.Join(errs...)
}

// kill ends every worker at once, for error paths.
func (f *fleet) kill() {
	for _, p := range f.procs {
		if p.cmd.Process == nil {
			continue
		}
		if f.external {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		} else {
			_ = p.cmd.Process.Kill()
		}
	}
}
