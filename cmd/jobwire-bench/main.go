// Command jobwire-bench measures the broker end to end over real gRPC on loopback, with the
// broker, the workers and the producer in separate processes, as they run in production.
//
// It builds the jobwire binary, starts a fresh broker on a free port and a temporary database
// for every scenario, and starts worker processes by running itself again with the hidden
// worker subcommand (the Go worker SDK with a no-op handler). The process that parses the flags
// is the producer. Scenarios:
//
//	enqueue-1       one job per Enqueue call, many producer goroutines
//	enqueue-100     EnqueueBatch of 100
//	enqueue-1000    EnqueueBatch of 1000 (this also fills the queue for drain)
//	drain           workers start after --jobs jobs are enqueued; time until all succeeded
//	e2e-1, e2e-100  producer and workers together: --e2e-jobs jobs enqueued (1 or 100 a call)
//	                while workers run; time until all succeeded
//	latency         open-loop producer at --rate jobs/s; the worker measures the time from
//	                just before Enqueue to the start of its handler
//
// Results are printed as a table; --json FILE writes them too. `jobwire-bench compare --ref
// COMMIT` runs this benchmark and COMMIT's in interleaved rounds and prints the ratio per
// scenario (make bench-compare); `jobwire-bench breakdown` times one enqueue stage by stage,
// `jobwire-bench floor` what a lone job cannot cost less than on the machine (a round trip, a
// commit), and `jobwire-bench machine-cpu -- COMMAND` what the whole machine spent a job in each
// result of a benchmark, this one's or a peer harness's. See docs/performance.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		if errors.Is(err, errHelp) {
			return // the flag package printed the usage asked for
		}
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "jobwire-bench:", err)
		os.Exit(1)
	}
}

// errUsage reports a bad command line whose message was already printed; errHelp, a command
// line that asked for its usage, printed too.
var (
	errUsage = errors.New("usage")
	errHelp  = errors.New("help")
)

// parseCommandLine parses args into fs, and says errHelp or errUsage where the flag package
// printed the usage or why args are wrong.
func parseCommandLine(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return errUsage
	}
	return nil
}

func run(ctx context.Context, args []string) error {
	if len(args) > 0 {
		// Hidden subcommands: the processes the benchmark starts.
		switch args[0] {
		case workerCommand:
			return runWorker(ctx, args[1:])
		case brokerCommand:
			return runBroker(ctx, args[1:])
		case compareCommand:
			return runCompare(ctx, args[1:])
		case breakdownCommand:
			return runBreakdown(ctx, args[1:])
		case floorCommand:
			return runFloor(ctx, args[1:])
		case floorServerCommand:
			return runFloorServer(ctx)
		case machineCPUCommand:
			return runMachineCPU(ctx, args[1:])
		}
	}
	cfg, err := parseFlags(args)
	if err != nil {
		return err
	}
	return runBench(ctx, cfg)
}
