package main

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the unit of the CPU times in /proc/PID/stat: USER_HZ, which Linux fixes at 100
// for every architecture it exposes to user space.
const clockTicks = 100

// processCPU returns the CPU time (user plus system) a process has used so far, read from
// /proc/PID/stat, with a resolution of 10 ms. ok is false where there is no /proc. A CPU time
// per job says what a change cost even when the machine is busy with other work, which moves
// a rate far more than it moves the CPU each job takes.
func processCPU(pid int) (cpu time.Duration, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces: the fields that
	// follow are counted from its closing parenthesis. utime and stime are fields 14 and 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, true
}

// readProcStat returns how long the machine's CPUs have been busy since it booted, summed over
// every CPU, and how many CPUs that sums (the cpuN lines): user (guests included), nice,
// system, irq and softirq time from /proc/stat's first line. Idle, I/O wait and the time the
// host stole are left out. ok is false where there is no /proc. Every process of a run shares
// the machine (the broker, the workers, the producer and a database on the same host), so the
// machine's CPU a job is what a run costs as a whole: what a rate needs, where the processes'
// own figures each tell one part.
func readProcStat() (busy time.Duration, cpus int, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	return parseProcStat(string(b))
}

// parseProcStat reads readProcStat's figures from the text of /proc/stat.
func parseProcStat(stat string) (busy time.Duration, cpus int, ok bool) {
	first, rest, _ := strings.Cut(stat, "\n")
	f := strings.Fields(first)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, 0, false
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7} { // user, nice, system, irq, softirq
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, 0, false
		}
		ticks += n
	}
	for line := range strings.Lines(rest) {
		if name, _, _ := strings.Cut(line, " "); strings.HasPrefix(name, "cpu") {
			cpus++
		}
	}
	return time.Duration(ticks) * time.Second / clockTicks, cpus, true
}

// cpuMeter measures the CPU the scenario's brokers, and the whole machine, use between its
// creation and perJob, and how busy the brokers' writers are (writerBusy).
type cpuMeter struct {
	env          *scenarioEnv
	start        time.Duration
	ok           bool
	machineStart time.Duration
	machineOK    bool
	writers      writerMeter
}

// brokerCPU sums the CPU time of the scenario's brokers.
func (e *scenarioEnv) brokerCPU() (time.Duration, bool) {
	var sum time.Duration
	for _, bp := range e.brokers {
		c, ok := processCPU(bp.cmd.Process.Pid)
		if !ok {
			return 0, false
		}
		sum += c
	}
	return sum, true
}

// meterCPU starts measuring the brokers' and the machine's CPU time, and their writers'. It
// reads the writers' metrics first, and perJob before writerBusy reads them again, so that
// serving them is left out of the CPU a job; a scenario starts its clock after meterCPU, so
// that they are left out of its time too.
func (e *scenarioEnv) meterCPU() cpuMeter {
	writers := meterWriters(e.brokers)
	c, ok := e.brokerCPU()
	mc, _, mok := readProcStat()
	return cpuMeter{env: e, start: c, ok: ok, machineStart: mc, machineOK: mok, writers: writers}
}

// writerBusy returns the share of the time since the meter started that the busiest broker's
// writer spent writing, in percent (0 when it cannot be read).
func (m cpuMeter) writerBusy() float64 { return m.writers.busy() }

// perJob returns the brokers' and the machine's CPU time since the meter started, in
// microseconds per job, each 0 when it cannot be read.
func (m cpuMeter) perJob(jobs int64) (broker, machine float64) {
	end, ok := m.env.brokerCPU()
	mend, _, mok := readProcStat()
	return usPerJob(end-m.start, ok && m.ok, jobs), usPerJob(mend-m.machineStart, mok && m.machineOK, jobs)
}

// workerCPU sums the CPU time of the fleet's worker processes; ok is false for --worker-cmd
// workers, whose shell does not count the CPU of the children it waits for.
func (f *fleet) workerCPU() (sum time.Duration, ok bool) {
	if f.external {
		return 0, false
	}
	for _, p := range f.procs {
		c, ok := processCPU(p.cmd.Process.Pid)
		if !ok {
			return 0, false
		}
		sum += c
	}
	return sum, true
}

// meterWorkers starts measuring the fleet's CPU time (workerCPU); the func it returns gives
// the time since, in microseconds per job of jobs (0 when it cannot be read).
func (f *fleet) meterWorkers() func(jobs int64) float64 {
	start, ok := f.workerCPU()
	return func(jobs int64) float64 {
		end, endOK := f.workerCPU()
		return usPerJob(end-start, ok && endOK, jobs)
	}
}

// usPerJob is d in microseconds per job, or 0 when it could not be read.
func usPerJob(d time.Duration, ok bool, jobs int64) float64 {
	if !ok || jobs <= 0 {
		return 0
	}
	return float64(d) / float64(time.Microsecond) / float64(jobs)
}
