package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// machineCPUCommand runs a benchmark, this one or a peer's harness (bench/river, bench/asynq,
// bench/faktory), and prints after each of its results what the whole machine spent a job
// while it was measured: the figure that says whether a rate is bound by the machine's CPUs,
// and how much of them a peer's database server took. jobwire-bench's own MACHINE US column
// reads the same for its rows; this measures every harness alike.
const machineCPUCommand = "machine-cpu"

// sampleEvery is how often machine-cpu reads the machine's and the server's CPU time. A
// result's window is bounded by the samples nearest its ends, so each end is off by at most
// half of it.
const sampleEvery = 20 * time.Millisecond

func runMachineCPU(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(machineCPUCommand, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: jobwire-bench %s [--server NAME] -- COMMAND [ARGS...]\n\n", machineCPUCommand)
		fmt.Fprintln(fs.Output(), "Runs COMMAND, passing its output through, and after each result it prints (a jobwire-bench\n"+
			"row, or a peer harness's \"PEER SCENARIO N jobs S.SSs R jobs/s\") the machine's CPU a job over the\n"+
			"seconds the result measured, ending as it was printed: user, nice, system, irq and softirq\n"+
			"time of every CPU (/proc/stat), and the share of a database server's processes.\n\nFlags:")
		fs.PrintDefaults()
	}
	serverName := fs.String("server", "", "count the CPU of the processes of this name as the database server's (postgres, redis-server)")
	if err := parseCommandLine(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fmt.Fprintf(os.Stderr, "jobwire-bench %s: give the command to run after --\n", machineCPUCommand)
		return errUsage
	}
	if runtime.GOOS != "linux" {
		return fmt.Errorf("%s reads /proc, which %s does not have", machineCPUCommand, runtime.GOOS)
	}
	server := &serverProcs{name: *serverName}
	m := newCPUSampler(func() (cpuSample, error) { return readCPUSample(server) })
	if _, err := m.take(); err != nil {
		return err
	}
	stop := m.run(sampleEvery)
	defer stop()

	cmd := exec.CommandContext(ctx, fs.Arg(0), fs.Args()[1:]...)
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	if err := passResults(out, os.Stdout, m, server.name != ""); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return err
	}
	return cmd.Wait()
}

// passResults copies r to w line by line, and after each result line the machine's CPU a job
// over the seconds it measured.
func passResults(r io.Reader, w io.Writer, m *cpuSampler, server bool) error {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(w, line)
		res, ok := parseResultLine(line)
		if !ok {
			continue
		}
		end, err := m.take()
		if err != nil {
			return err
		}
		start := m.at(end.at.Add(-time.Duration(res.seconds * float64(time.Second))))
		fmt.Fprintln(w, describeWindow(res, start, end, server))
	}
	return sc.Err()
}

// benchResult is what machine-cpu reads of a result line.
type benchResult struct {
	name    string
	jobs    int64
	seconds float64
}

var (
	// A jobwire-bench row: SCENARIO JOBS SECONDS JOBS/S ... (the header's JOBS is not a number).
	benchRow = regexp.MustCompile(`^(\S+)\s+(\d+)\s+(\d+\.\d+)\s+\d+\s`)
	// A peer harness's line: "river drain 100000 jobs 6.05s 16518 jobs/s ...".
	peerRow = regexp.MustCompile(`^(\S+ \S+) (\d+) jobs (\d+\.\d+)s \d+ jobs/s`)
)

// parseResultLine reads a result line of jobwire-bench or of a peer's harness.
func parseResultLine(line string) (benchResult, bool) {
	m := peerRow.FindStringSubmatch(line)
	if m == nil {
		m = benchRow.FindStringSubmatch(line)
	}
	if m == nil {
		return benchResult{}, false
	}
	jobs, err1 := strconv.ParseInt(m[2], 10, 64)
	secs, err2 := strconv.ParseFloat(m[3], 64)
	if err1 != nil || err2 != nil || jobs <= 0 || secs <= 0 {
		return benchResult{}, false
	}
	return benchResult{name: m[1], jobs: jobs, seconds: secs}, true
}

// describeWindow says what the machine spent on res's jobs between start and end.
func describeWindow(res benchResult, start, end cpuSample, server bool) string {
	busy := end.busy - start.busy
	wall := end.at.Sub(start.at)
	s := fmt.Sprintf("machine-cpu: %s: %.1f us a job of the machine", res.name, usPerJob(busy, true, res.jobs))
	if wall > 0 && end.cpus > 0 {
		s += fmt.Sprintf(", its %d CPUs %.0f%% busy over %.2f s", end.cpus,
			100*float64(busy)/float64(wall)/float64(end.cpus), wall.Seconds())
	}
	if server {
		s += fmt.Sprintf("; the server's processes %.1f us a job", usPerJob(end.server-start.server, true, res.jobs))
	}
	return s
}

// cpuSample is the machine's busy time, the CPUs it sums and the server's CPU time at one
// moment.
type cpuSample struct {
	at     time.Time
	busy   time.Duration
	cpus   int
	server time.Duration
}

// cpuSampler keeps the samples read since it started, in the order they were read: one read
// at a time, so read needs no lock of its own.
type cpuSampler struct {
	read    func() (cpuSample, error)
	mu      sync.Mutex
	samples []cpuSample
}

func newCPUSampler(read func() (cpuSample, error)) *cpuSampler { return &cpuSampler{read: read} }

// take reads a sample now and keeps it.
func (m *cpuSampler) take() (cpuSample, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.read()
	if err == nil {
		m.samples = append(m.samples, s)
	}
	return s, err
}

// run takes a sample every interval until the returned stop is called.
func (m *cpuSampler) run(every time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_, _ = m.take() // a failed read leaves a gap; the next one fills it
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// at returns the kept sample nearest to t (the first, when t is before it).
func (m *cpuSampler) at(t time.Time) cpuSample {
	m.mu.Lock()
	defer m.mu.Unlock()
	best := m.samples[0]
	for _, s := range m.samples[1:] {
		if s.at.Sub(t).Abs() < best.at.Sub(t).Abs() {
			best = s
		}
	}
	return best
}

// serverProcs are a database server's processes: those named name (none when it is empty).
type serverProcs struct {
	name string
	// last is each process's latest CPU time: a process that ended (a closed connection's
	// backend) keeps its share, which a sum over the live processes would drop.
	last map[int]time.Duration
}

// readCPUSample reads the machine's busy time and the server's processes' CPU time now.
func readCPUSample(p *serverProcs) (cpuSample, error) {
	busy, cpus, ok := readProcStat()
	if !ok {
		return cpuSample{}, errors.New("cannot read the machine's CPU time from /proc/stat")
	}
	s := cpuSample{at: time.Now(), busy: busy, cpus: cpus}
	if p.name != "" {
		s.server = p.cpu()
	}
	return s, nil
}

// cpu sums the CPU time of the server's processes, live or ended since the first reading.
func (p *serverProcs) cpu() time.Duration {
	entries, _ := os.ReadDir("/proc")
	now := map[int]time.Duration{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if comm, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err != nil || strings.TrimSpace(string(comm)) != p.name {
			continue
		}
		if c, ok := processCPU(pid); ok {
			now[pid] = c
		}
	}
	return p.add(now)
}

// add records the CPU time of the processes read now and returns the sum over every process
// read so far, each at its latest reading.
func (p *serverProcs) add(now map[int]time.Duration) time.Duration {
	if p.last == nil {
		p.last = map[int]time.Duration{}
	}
	maps.Copy(p.last, now)
	var sum time.Duration
	for _, c := range p.last {
		sum += c
	}
	return sum
}
