package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/worker"
)

// The jobs' behaviour is in their payload, so the checks can tell what each job should have
// done from the job alone.
type behaviour string

const (
	// succeed: every attempt succeeds.
	succeed behaviour = "succeed"
	// flaky: attempts up to Fails fail transiently, later ones succeed.
	flaky behaviour = "flaky"
	// transient: every attempt fails transiently, so the job dies of max attempts.
	transient behaviour = "transient"
	// fatal: every attempt fails fatally, so the job dies after one attempt.
	fatal behaviour = "fatal"
)

type payload struct {
	Do    behaviour `json:"do"`
	Fails int       `json:"fails,omitempty"`
	// WorkMS is how long the handler works before it answers, so that kills find jobs running.
	WorkMS int `json:"work_ms,omitempty"`
}

// verdict is what an attempt with this number returns.
func (p payload) verdict(attempt int) error {
	switch p.Do {
	case succeed:
		return nil
	case flaky:
		if attempt <= p.Fails {
			return errors.New("flaky: not yet")
		}
		return nil
	case transient:
		return errors.New("transient: never")
	case fatal:
		return worker.Fatal(errors.New("fatal: bad payload"))
	}
	return worker.Fatal(fmt.Errorf("unknown behaviour %q", p.Do))
}

// failsAt reports whether an attempt with this number fails when its handler runs to the end.
func (p payload) failsAt(attempt int) bool { return p.verdict(attempt) != nil }

// jobTypes are the types the producer spreads its jobs over: each has its own breaker.
var jobTypes = []string{"chaos.alpha", "chaos.beta"}

// ledger is what the workers saw: every handler run that finished, and every ResultAck.
type ledger struct {
	// zombie, if set, replays a job's earlier leases whenever the job starts under a new one.
	zombie *zombie

	mu sync.Mutex
	// leases: job id → every lease token its handler started under, in order.
	leases map[int64][]string
	// runs: job id → the runs of its handler that reached a verdict.
	runs map[int64][]run
	// acks: job id → every ResultAck the broker sent about it.
	acks map[int64][]ack
}

type run struct {
	attempt int
	token   string
	ok      bool
}

type ack struct {
	token    string
	decision jobwirev1.Decision
}

func newLedger() *ledger {
	return &ledger{runs: map[int64][]run{}, acks: map[int64][]ack{}, leases: map[int64][]string{}}
}

func (l *ledger) handle(ctx context.Context, j *worker.Job) error {
	var p payload
	if err := json.Unmarshal(j.Payload, &p); err != nil {
		return worker.Fatal(err)
	}
	l.mu.Lock()
	earlier := l.leases[j.ID]
	l.leases[j.ID] = append(earlier, j.LeaseToken)
	l.mu.Unlock()
	if l.zombie != nil {
		// While the job runs under this lease, every earlier one is stale.
		for _, stale := range earlier {
			if stale != j.LeaseToken {
				l.zombie.replay(ctx, j.ID, stale)
			}
		}
	}
	if p.WorkMS > 0 {
		t := time.NewTimer(time.Duration(p.WorkMS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	err := p.verdict(j.Attempt)
	l.mu.Lock()
	l.runs[j.ID] = append(l.runs[j.ID], run{attempt: j.Attempt, token: j.LeaseToken, ok: err == nil})
	l.mu.Unlock()
	return err
}

// startedUnderLater reports whether a handler started jobID under a lease granted after the
// one of token (lease numbers grow with every lease of a job).
func (l *ledger) startedUnderLater(jobID int64, token string) bool {
	mine, err := job.ParseLeaseToken(token)
	if err != nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range l.leases[jobID] {
		if later, err := job.ParseLeaseToken(t); err == nil && later.Seq > mine.Seq {
			return true
		}
	}
	return false
}

// recordAck records a ResultAck a worker received.
func (l *ledger) recordAck(r *jobwirev1.ConnectResponse) {
	if a := r.GetResultAck(); a != nil {
		l.mu.Lock()
		l.acks[a.GetJobId()] = append(l.acks[a.GetJobId()], ack{token: a.GetLeaseToken(), decision: a.GetDecision()})
		l.mu.Unlock()
	}
}

// onReceive is a stream interceptor that hands f each message a worker receives, the
// messages of a batch one by one.
func onReceive(f func(*jobwirev1.ConnectResponse)) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
		streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return &recvStream{ClientStream: s, f: f}, nil
	}
}

type recvStream struct {
	grpc.ClientStream
	f func(*jobwirev1.ConnectResponse)
}

func (s *recvStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if r, ok := m.(*jobwirev1.ConnectResponse); ok && err == nil {
		if b := r.GetBatch(); b != nil {
			for _, x := range b.GetMessages() {
				s.f(x)
			}
		} else {
			s.f(r)
		}
	}
	return err
}

// startWorkers runs n Go SDK workers, named name-0 to name-(n-1), that serve every type of
// jobTypes with l, each on a connection to every broker of addrs (client.DialBrokers) through
// onReceive(l.recordAck), until ctx ends. The returned function waits for them to stop.
func startWorkers(ctx context.Context, name string, n, concurrency int, addrs []string, l *ledger, logPath string) (func() error, error) {
	handlers := map[string]worker.HandlerFunc{}
	for _, typ := range jobTypes {
		handlers[typ] = l.handle
	}
	return startFleet(ctx, fleet{name: name, n: n, slots: concurrency, addrs: addrs, handlers: handlers, logPath: logPath,
		dial: []client.DialOption{client.WithDialOptions(grpc.WithChainStreamInterceptor(onReceive(l.recordAck)))}})
}

// fleet is a set of Go SDK workers the tests run against a brokerSet.
type fleet struct {
	name     string // worker i is named name-i
	n, slots int    // workers, and jobs each runs at once
	addrs    []string
	handlers map[string]worker.HandlerFunc // by job type
	dial     []client.DialOption           // besides the brokers' addresses
	logPath  string                        // the workers' warnings and errors
}

// startFleet runs f's workers, each on a connection to every broker of f.addrs
// (client.DialBrokers), until ctx ends. The returned function waits for them to stop and
// joins their errors.
func startFleet(ctx context.Context, f fleet) (func() error, error) {
	logFile, err := os.Create(f.logPath)
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var wg sync.WaitGroup
	errs := make([]error, f.n)
	var conns []*client.Client
	for i := range f.n {
		// Each worker lists the brokers from a different one, so they start spread out.
		rot := append(append([]string{}, f.addrs[i%len(f.addrs):]...), f.addrs[:i%len(f.addrs)]...)
		conn, err := client.DialBrokers(ctx, rot, f.dial...)
		if err != nil {
			return nil, err // the workers started stop with ctx
		}
		conns = append(conns, conn)
		w, err := worker.New(conn.Conn(), worker.Options{
			ID:               fmt.Sprintf("%s-%d", f.name, i),
			Concurrency:      f.slots,
			ShutdownGrace:    5 * time.Second,
			ReconnectBackoff: worker.Backoff{Base: 50 * time.Millisecond, Max: 500 * time.Millisecond},
			Logger:           log,
		})
		if err != nil {
			return nil, err // the workers started stop with ctx
		}
		for typ, h := range f.handlers {
			w.Handle(typ, h)
		}
		wg.Go(func() { errs[i] = w.Run(ctx) })
	}
	return func() error {
		wg.Wait()
		for _, c := range conns {
			_ = c.Close()
		}
		_ = logFile.Close()
		return errors.Join(errs...)
	}, nil
}

// plan is the jobs the producer enqueues, drawn from the test's seeded source.
func plan(rng *rand.Rand, n int) []client.JobSpec {
	specs := make([]client.JobSpec, n)
	for i := range specs {
		p := payload{WorkMS: rng.IntN(20)}
		maxAttempts := 6
		switch r := rng.IntN(100); {
		case r < 85:
			p.Do = succeed
		case r < 93:
			p.Do, p.Fails = flaky, 1+rng.IntN(2)
		case r < 97:
			p.Do, maxAttempts = transient, 3
		default:
			p.Do, maxAttempts = fatal, 3
		}
		data, _ := json.Marshal(p)
		specs[i] = client.JobSpec{Type: jobTypes[rng.IntN(len(jobTypes))], Payload: data, MaxAttempts: maxAttempts,
			IdempotencyKey: fmt.Sprintf("chaos-%d", i)}
	}
	return specs
}

// producer enqueues jobs in batches, each batch retried until a broker acknowledges it (the
// idempotency keys make a retry of a batch that was stored return the same jobs), and records
// the id acknowledged for every job.
type producer struct {
	c     *client.Client
	specs []client.JobSpec

	mu      sync.Mutex
	ids     []int64 // by index in specs; 0 until acknowledged
	retries int
}

// run enqueues specs at an even pace over d, batch a call.
func (p *producer) run(ctx context.Context, d time.Duration, batch int) error {
	p.ids = make([]int64, len(p.specs))
	calls := (len(p.specs) + batch - 1) / batch
	every := d / time.Duration(calls)
	start := time.Now()
	var wg sync.WaitGroup
	for k := range calls {
		if wait := time.Until(start.Add(time.Duration(k) * every)); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				wg.Wait()
				return ctx.Err()
			}
		}
		from, to := k*batch, min((k+1)*batch, len(p.specs))
		wg.Go(func() { p.enqueue(ctx, from, to) })
	}
	wg.Wait()
	return ctx.Err()
}

func (p *producer) enqueue(ctx context.Context, from, to int) {
	for ctx.Err() == nil {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := p.c.EnqueueBatch(callCtx, p.specs[from:to])
		cancel()
		if err != nil {
			p.mu.Lock()
			p.retries++
			p.mu.Unlock()
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
			}
			continue
		}
		p.mu.Lock()
		for i, r := range res {
			p.ids[from+i] = r.ID
		}
		p.mu.Unlock()
		return
	}
}
