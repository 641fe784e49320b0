// Command jobwire-soak runs the resource attacks of the security suite against a broker started
// as a separate process, one after another for a bounded time, while a bystander client
// enqueues jobs and reads them back and a bystander worker runs them. For each attack it prints
// the bystander's Enqueue+GetJob latency (p50, p99) and the broker's peak resident memory
// (VmHWM from /proc). It is a soak test to read, not a unit test: it asserts nothing.
//
//	go run ./cmd/jobwire-soak -duration 60s
//
// -auth runs the broker with auth on, every client with an admin token, and adds the attacks on
// authentication; -attacks runs only the attacks whose names match a regular expression (the
// baseline always runs); -db postgres://... runs the broker on PostgreSQL.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/percentile"
)

func main() {
	duration := flag.Duration("duration", time.Minute, "total time; each attack gets an equal share")
	withAuth := flag.Bool("auth", false, "run the broker with auth on and add the attacks on authentication")
	only := flag.String("attacks", "", "run only the attacks whose names match this regular expression")
	db := flag.String("db", "", "the broker's database (default: a new SQLite file); a postgres:// URL runs it on PostgreSQL")
	flag.Parse()
	filter, err := regexp.Compile(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "jobwire-soak: -attacks:", err)
		os.Exit(2)
	}
	if err := run(*duration, *db, *withAuth, filter); err != nil {
		fmt.Fprintln(os.Stderr, "jobwire-soak:", err)
		os.Exit(1)
	}
}

// attack runs until ctx ends.
type attack struct {
	name string
	run  func(ctx context.Context, conn *grpc.ClientConn, addr string) error
}

func run(total time.Duration, db string, withAuth bool, filter *regexp.Regexp) error {
	dir, err := os.MkdirTemp("", "jobwire-soak")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "jobwire")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/jobwire").CombinedOutput(); err != nil {
		return fmt.Errorf("build the broker: %v\n%s", err, out)
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	if db == "" {
		db = filepath.Join(dir, "jobwire.db")
	}
	broker := exec.Command(bin, "serve", "--listen", addr, "--http-listen", "off", "--db", db,
		"--log-level", "warn")
	dialOpts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if withAuth {
		token := "soak-admin-token-" + strconv.FormatInt(time.Now().UnixNano(), 36) + strings.Repeat("x", 32)
		broker.Args = append(broker.Args, "--auth")
		broker.Env = append(os.Environ(), "JOBWIRE_BOOTSTRAP_TOKEN="+token)
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(client.TokenCredentials(token)))
	}
	var brokerLog bytes.Buffer
	broker.Stdout, broker.Stderr = &brokerLog, &brokerLog
	if err := broker.Start(); err != nil {
		return err
	}
	defer func() {
		_ = broker.Process.Signal(os.Interrupt)
		_ = broker.Wait()
	}()
	conn, err := grpc.NewClient(addr, dialOpts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := waitReady(conn); err != nil {
		return fmt.Errorf("%v\n%s", err, brokerLog.String())
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	lat := &latencies{}
	var bystander sync.WaitGroup
	bystander.Add(2)
	go func() { defer bystander.Done(); runWorker(ctx, conn, "bystander-worker", "bystander") }()
	go func() { defer bystander.Done(); runBystander(ctx, conn, lat) }()

	attacks := []attack{
		{"none (baseline)", func(ctx context.Context, _ *grpc.ClientConn, _ string) error { <-ctx.Done(); return nil }},
		{"lease takeover by guessing", guessLeases},
		{"40,000 job types in a Hello", typeFlood},
		{"PauseQueue flood", pauseFlood},
		{"non-reading worker", nonReader},
		{"heartbeat flood naming bogus leases", heartbeatFlood},
		{"oversized failures", oversizedFailures},
		{"idle connections", idleConnections},
	}
	if withAuth {
		attacks = append(attacks, attack{"one token's worker streams", tokenStreams},
			attack{"bad-token guesses, 500 a second", guessTokens(500)},
			attack{"bad-token guesses, flat out", guessTokens(0)})
	}
	attacks = slices.DeleteFunc(attacks, func(a attack) bool { return a.name != attacks[0].name && !filter.MatchString(a.name) })
	share := total / time.Duration(len(attacks))
	fmt.Printf("broker pid %d on %s; %s per attack\n\n", broker.Process.Pid, addr, share.Round(time.Millisecond))
	fmt.Printf("%-38s %10s %10s %8s %10s %10s\n", "attack", "p50", "p99", "ops", "RSS MB", "peak MB")
	for _, a := range attacks {
		actx, cancel := context.WithTimeout(ctx, share)
		lat.reset()
		errc := make(chan error, 1)
		go func() { errc <- a.run(actx, conn, addr) }()
		<-actx.Done()
		cancel()
		aerr := <-errc
		p50, p99, n := lat.percentiles()
		rss, hwm := memory(broker.Process.Pid)
		fmt.Printf("%-38s %10s %10s %8d %10.1f %10.1f\n", a.name, p50, p99, n, rss, hwm)
		if aerr != nil && !errors.Is(aerr, context.DeadlineExceeded) && !errors.Is(aerr, context.Canceled) {
			fmt.Printf("  (attack stopped early: %v)\n", aerr)
		}
	}
	stop()
	bystander.Wait()
	return nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func waitReady(conn *grpc.ClientConn) error {
	p := jobwirev1.NewAdminServiceClient(conn)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := p.ListQueues(ctx, &jobwirev1.ListQueuesRequest{})
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the broker did not answer: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// memory reads the process's resident and peak resident memory in MB.
func memory(pid int) (rss, peak float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1, -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		var kb float64
		if _, err := fmt.Sscanf(line, "VmRSS: %f kB", &kb); err == nil {
			rss = kb / 1024
		}
		if _, err := fmt.Sscanf(line, "VmHWM: %f kB", &kb); err == nil {
			peak = kb / 1024
		}
	}
	return rss, peak
}

type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) { l.mu.Lock(); l.d = append(l.d, d); l.mu.Unlock() }
func (l *latencies) reset()              { l.mu.Lock(); l.d = nil; l.mu.Unlock() }

func (l *latencies) percentiles() (p50, p99 time.Duration, n int) {
	l.mu.Lock()
	d := slices.Clone(l.d)
	l.mu.Unlock()
	if len(d) == 0 {
		return 0, 0, 0
	}
	slices.Sort(d)
	at := func(p float64) time.Duration { return percentile.NearestRank(d, p).Round(10 * time.Microsecond) }
	return at(50), at(99), len(d)
}

// runBystander enqueues a job and reads it back, about 200 times a second, timing each pair.
func runBystander(ctx context.Context, conn *grpc.ClientConn, lat *latencies) {
	p := jobwirev1.NewProducerServiceClient(conn)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		res, err := p.Enqueue(cctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "bystander", Queue: "bystander", Payload: []byte(`{}`)}})
		if err == nil {
			_, err = p.GetJob(cctx, &jobwirev1.GetJobRequest{Id: res.GetJob().GetId()})
		}
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				lat.add(5 * time.Second) // a failure counts as the worst latency
			}
			continue
		}
		lat.add(time.Since(start))
	}
}

// runWorker runs jobs of typ as they come, reconnecting if the stream ends; fail, when set,
// turns each success into that failure.
func runWorker(ctx context.Context, conn *grpc.ClientConn, id, typ string, fail ...*jobwirev1.Failure) {
	w := jobwirev1.NewWorkerServiceClient(conn)
	for ctx.Err() == nil {
		stream, err := w.Connect(ctx)
		if err != nil {
			continue
		}
		hello := &jobwirev1.Hello{WorkerId: id, JobTypes: []string{typ}, Capacity: 16}
		if err := stream.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Hello{Hello: hello}}); err != nil {
			continue
		}
		for {
			m, err := stream.Recv()
			if err != nil {
				break
			}
			a := m.GetAssignment()
			if a == nil {
				continue
			}
			r := &jobwirev1.Result{JobId: a.GetJob().GetId(), LeaseToken: a.GetLeaseToken(),
				Outcome: &jobwirev1.Result_Success{Success: &jobwirev1.Success{}}}
			if len(fail) > 0 {
				r.Outcome = &jobwirev1.Result_Failure{Failure: fail[0]}
			}
			if err := stream.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Result{Result: r}}); err != nil {
				break
			}
		}
	}
}

// connect opens a worker stream and sends hello; it returns the stream, or nil.
func connect(ctx context.Context, conn *grpc.ClientConn, hello *jobwirev1.Hello) jobwirev1.WorkerService_ConnectClient {
	stream, err := jobwirev1.NewWorkerServiceClient(conn).Connect(ctx)
	if err != nil {
		return nil
	}
	if err := stream.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Hello{Hello: hello}}); err != nil {
		return nil
	}
	return stream
}

// guessLeases connects stream after stream listing guessed leases of running jobs.
func guessLeases(ctx context.Context, conn *grpc.ClientConn, _ string) error {
	for i := 0; ctx.Err() == nil; i++ {
		hello := &jobwirev1.Hello{WorkerId: "attacker", JobTypes: []string{"bystander"}, Capacity: 1000}
		for j := range 1000 {
			hello.Held = append(hello.Held, &jobwirev1.LeaseRef{JobId: int64(i*1000 + j + 1), LeaseToken: "1.00000000000000000000000000000000"})
		}
		sctx, cancel := context.WithCancel(ctx)
		if s := connect(sctx, conn, hello); s != nil {
			_, _ = s.Recv() // the Welcome, with every guess lost
		}
		cancel()
	}
	return ctx.Err()
}

// typeFlood sends Hellos naming 40,000 job types.
func typeFlood(ctx context.Context, conn *grpc.ClientConn, _ string) error {
	types := make([]string, 40000)
	for i := range types {
		types[i] = fmt.Sprintf("type-%d", i)
	}
	for ctx.Err() == nil {
		sctx, cancel := context.WithCancel(ctx)
		if s := connect(sctx, conn, &jobwirev1.Hello{WorkerId: "flood", JobTypes: types, Capacity: 1}); s != nil {
			_, _ = s.Recv()
		}
		cancel()
	}
	return ctx.Err()
}

// pauseFlood pauses queue after new queue, from eight callers at once.
func pauseFlood(ctx context.Context, conn *grpc.ClientConn, _ string) error {
	a := jobwirev1.NewAdminServiceClient(conn)
	var n atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				_, _ = a.PauseQueue(ctx, &jobwirev1.PauseQueueRequest{Queue: fmt.Sprintf("paused-%d", n.Add(1))})
			}
		}()
	}
	wg.Wait()
	fmt.Printf("  (%d queues paused)\n", n.Load())
	return ctx.Err()
}

// nonReader connects workers of capacity 10,000 that never read, and keeps 1 MiB jobs coming.
func nonReader(ctx context.Context, conn *grpc.ClientConn, _ string) error {
	p := jobwirev1.NewProducerServiceClient(conn)
	payload := bytes.Repeat([]byte("x"), 1<<20)
	for i := range 20 {
		if connect(ctx, conn, &jobwirev1.Hello{WorkerId: fmt.Sprintf("sloth-%d", i), JobTypes: []string{"sloth"}, Capacity: 10000}) == nil {
			break
		}
	}
	for ctx.Err() == nil {
		_, _ = p.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "sloth", Queue: "sloth", Payload: payload}})
		time.Sleep(20 * time.Millisecond)
	}
	return ctx.Err()
}

// heartbeatFlood sends heartbeats naming bogus leases as fast as it can, without reading.
func heartbeatFlood(ctx context.Context, conn *grpc.ClientConn, _ string) error {
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				s := connect(ctx, conn, &jobwirev1.Hello{WorkerId: fmt.Sprintf("hb-%d", i), JobTypes: []string{"none"}, Capacity: 10000})
				if s == nil {
					continue
				}
				hb := &jobwirev1.Heartbeat{}
				for j := range 10000 {
					hb.Leases = append(hb.Leases, &jobwirev1.LeaseRef{JobId: int64(j + 1), LeaseToken: "1.00000000000000000000000000000000"})
				}
				for ctx.Err() == nil {
					if err := s.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Heartbeat{Heartbeat: hb}}); err != nil {
						break // closed for its rate or its outbox: connect again
					}
				}
			}
		}()
	}
	wg.Wait()
	return ctx.Err()
}

// oversizedFailures fails jobs with failures of 3 MiB of text.
func oversizedFailures(ctx context.Context, conn *grpc.ClientConn, _ string) error {
	huge := strings.Repeat("x", 1<<20)
	f := &jobwirev1.Failure{Kind: jobwirev1.FailureKind_FAILURE_KIND_FATAL, ErrorType: huge, Message: huge, Details: huge}
	go runWorker(ctx, conn, "failer", "fails", f)
	p := jobwirev1.NewProducerServiceClient(conn)
	for ctx.Err() == nil {
		_, _ = p.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "fails", Queue: "fails"}})
		time.Sleep(5 * time.Millisecond)
	}
	return ctx.Err()
}

// idleConnections opens connections and leaves them idle.
func idleConnections(ctx context.Context, _ *grpc.ClientConn, addr string) error {
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for ctx.Err() == nil && len(conns) < 2000 {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		conns = append(conns, c)
	}
	fmt.Printf("  (%d idle connections opened)\n", len(conns))
	<-ctx.Done()
	return ctx.Err()
}

// guessTokens presents made-up tokens from 16 callers on 4 connections, perSecond a second
// between them (0: as fast as they can), and counts the answers: UNAUTHENTICATED ones were
// looked up, RESOURCE_EXHAUSTED ones were throttled.
func guessTokens(perSecond int) func(ctx context.Context, _ *grpc.ClientConn, addr string) error {
	return func(ctx context.Context, _ *grpc.ClientConn, addr string) error {
		return guessTokensAt(ctx, addr, perSecond)
	}
}

func guessTokensAt(ctx context.Context, addr string, perSecond int) error {
	const callers = 16
	var n, refused, throttled atomic.Int64
	var wg sync.WaitGroup
	for c := range 4 {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		a := jobwirev1.NewAdminServiceClient(conn)
		for g := range callers / 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var tick *time.Ticker
				if perSecond > 0 {
					tick = time.NewTicker(time.Duration(callers) * time.Second / time.Duration(perSecond))
					defer tick.Stop()
				}
				for i := 0; ctx.Err() == nil; i++ {
					if tick != nil {
						select {
						case <-ctx.Done():
							return
						case <-tick.C:
						}
					}
					guess := fmt.Sprintf("jw_%08x%08x_%043d", c*4+g, i, i)
					_, err := a.ListQueues(ctx, &jobwirev1.ListQueuesRequest{}, grpc.PerRPCCredentials(client.TokenCredentials(guess)))
					n.Add(1)
					switch status.Code(err) {
					case codes.Unauthenticated:
						refused.Add(1)
					case codes.ResourceExhausted:
						throttled.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	fmt.Printf("  (%d guesses: %d looked up and refused, %d throttled)\n", n.Load(), refused.Load(), throttled.Load())
	return ctx.Err()
}

// tokenStreams opens as many worker streams as it can, up to 1008 over 12 connections, with one
// worker token, then tries one stream with another token, and holds them open.
func tokenStreams(ctx context.Context, conn *grpc.ClientConn, addr string) error {
	tokens := jobwirev1.NewTokenServiceClient(conn)
	var tok [2]string
	for i := range tok {
		res, err := tokens.CreateToken(ctx, &jobwirev1.CreateTokenRequest{Name: fmt.Sprintf("soak-%d", i), Role: jobwirev1.TokenRole_TOKEN_ROLE_WORKER})
		if err != nil {
			return err
		}
		tok[i] = res.GetToken()
	}
	dial := func(token string) (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithPerRPCCredentials(client.TokenCredentials(token)))
	}
	opened, refusal := 0, ""
	for c := 0; c < 12 && refusal == ""; c++ {
		cc, err := dial(tok[0])
		if err != nil {
			return err
		}
		defer cc.Close()
		for range (1000 + 11) / 12 {
			s := connect(ctx, cc, &jobwirev1.Hello{WorkerId: fmt.Sprintf("hog-%d", opened), JobTypes: []string{"hog"}, Capacity: 1})
			if s == nil {
				break
			}
			if _, err := s.Recv(); err != nil {
				refusal = status.Code(err).String()
				break
			}
			opened++
		}
	}
	other := "refused"
	if cc, err := dial(tok[1]); err == nil {
		defer cc.Close()
		if s := connect(ctx, cc, &jobwirev1.Hello{WorkerId: "other", JobTypes: []string{"hog"}, Capacity: 1}); s != nil {
			if _, err := s.Recv(); err == nil {
				other = "welcomed"
			} else {
				other = status.Code(err).String()
			}
		}
	}
	fmt.Printf("  (%d streams opened with one token, then %s; another token's stream: %s)\n", opened, refusal, other)
	<-ctx.Done()
	return ctx.Err()
}
