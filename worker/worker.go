package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokerset"
	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/internal/protocodec"
)

// HandlerFunc runs one attempt of a job. A nil error reports success; see Classify for how an
// error is reported. ctx is cancelled when the job must stop; context.Cause(ctx) says why
// (ErrJobCancelled, ErrAttemptTimeout, ErrLeaseLost or ErrShutdown).
type HandlerFunc func(ctx context.Context, j *Job) error

// Job is one assigned attempt of a job. Handlers may keep it; the SDK does not reuse it.
type Job struct {
	ID       int64
	Type     string
	Queue    string
	Payload  []byte
	Priority int
	// Attempt is this attempt's number, starting at 1.
	Attempt     int
	MaxAttempts int
	CreatedAt   time.Time
	// IdempotencyKey is the key the job was enqueued with, if any.
	IdempotencyKey string
	// AttemptTimeout bounds this attempt; the handler's context has it as its deadline. Zero
	// means no limit.
	AttemptTimeout time.Duration
	// LeaseToken is the fencing token of this attempt, useful to make side effects idempotent
	// per attempt. It is opaque: compare it for equality only.
	LeaseToken string
	// Metadata is what the producer attached to the job (client.Metadata), including the W3C
	// trace context ("traceparent", "tracestate") the handler's span continues.
	Metadata map[string]string
	// ParentResults are the results of the jobs this one depends on, in the order the producer
	// named them; empty for a job without parents. Read them, do not change them.
	ParentResults []ParentResult

	out *outcome // the result and progress it reports (outcome.go)
}

// Options configure a Worker.
type Options struct {
	// ID names this worker process in attempt history. Required, 1..255 characters; keep it
	// stable across restarts of the same process slot.
	ID string
	// Queues the worker takes jobs from. Empty means every queue.
	Queues []string
	// Concurrency is the most handlers that run at once, and the capacity announced to the
	// broker (1..10000). Zero means 10.
	Concurrency int
	// ShutdownGrace is how long running handlers may keep running once Run's context is
	// cancelled. After it their contexts are cancelled with ErrShutdown, and Run waits up to
	// another ShutdownGrace for them to return and for their results to be acknowledged.
	// Zero means 30s.
	ShutdownGrace time.Duration
	// Logger receives connection and protocol events. Nil means slog.Default().
	Logger *slog.Logger
	// ReconnectBackoff spaces reconnect attempts and re-sends of messages the broker refused
	// because its storage was busy. The zero value is 100ms base, 5s cap, full jitter.
	ReconnectBackoff Backoff
	// Clock drives heartbeats, backoff and the shutdown grace. Nil means the wall clock. Tests
	// inside this module pass a clock.Fake to move time by hand. The attempt timeout is a
	// context deadline and always follows the wall clock.
	Clock clock.Clock
	// Movable says the connection reaches several brokers of one database through one address
	// (a load balancer, or a DNS name of several), so that a new stream may land on another
	// broker: brokers then even out their workers by ending a movable worker's stream, and it
	// reconnects (Hello.movable). A client.DialBrokers connection of several addresses is
	// movable without it.
	Movable bool
	// TracerProvider receives the handler spans ("process <queue>", children of the producer's
	// trace). Nil means the global provider (otel.GetTracerProvider).
	TracerProvider trace.TracerProvider
}

const (
	defaultConcurrency   = 10
	maxConcurrency       = 10000
	defaultShutdownGrace = 30 * time.Second
	// defaultHeartbeat is used only if the broker announces neither a heartbeat interval nor a
	// lease duration.
	defaultHeartbeat = 10 * time.Second
	// closeWait bounds how long a finished stream waits for the broker to end it after the
	// worker half-closed it.
	closeWait = 5 * time.Second
)

// Worker runs jobs from a broker. Register handlers with Handle or HandleJSON, then call Run.
type Worker struct {
	client jobwirev1.WorkerServiceClient
	opts   Options
	log    *slog.Logger
	clock  clock.Clock
	// movable: conn spreads over several brokers (client.DialBrokers), so a broker may move
	// this worker to another (Hello.movable).
	movable bool
	// slots holds one token per running handler, so no more than Concurrency run even when the
	// broker frees a cancelled job's slot before its handler has returned.
	slots chan struct{}

	tracerOnce sync.Once
	tr         trace.Tracer // see tracer

	hooks testHooks

	mu       sync.Mutex
	handlers map[string]HandlerFunc
	// sentinels name the errors registered with RegisterError; written only before Run.
	sentinels map[error]string
	jobTypes  []string
	running   bool
	// handlerBase is the parent of every handler context: Run's context without its
	// cancellation, because shutdown must not cut running handlers off before the grace.
	handlerBase context.Context
	// tasks are the leases this worker holds: jobs waiting for a slot, running, waiting for
	// their result to be acknowledged, or being released.
	tasks map[leaseRef]*task
	// active counts handler goroutines, including those of jobs already given up.
	active int
	sess   *session
	// stopping is set once Run's context is cancelled.
	stopping bool
	// stopped is closed once stopping and nothing is held or running any more.
	stopped       chan struct{}
	stoppedClosed bool
	// changed, when a waiter asked for it (changedLocked), is closed at the next change of
	// tasks or active: made only then, not at every change of a job's task.
	changed     chan struct{}
	graceTimers []clock.Timer
}

// testHooks let tests observe moments that have no protocol message.
type testHooks struct {
	// slotWait is called when an assigned job must wait for a free handler slot.
	slotWait func(jobID int64)
	// shutdownStarted is called once the shutdown grace timers are armed.
	shutdownStarted func()
}

// New returns a Worker that talks to the broker over conn.
func New(conn grpc.ClientConnInterface, opts Options) (*Worker, error) {
	if conn == nil {
		return nil, errors.New("worker: nil connection")
	}
	if n := len(opts.ID); n == 0 || n > 255 {
		return nil, fmt.Errorf("worker: Options.ID must be 1..255 characters, got %d", n)
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = defaultConcurrency
	}
	if opts.Concurrency < 1 || opts.Concurrency > maxConcurrency {
		return nil, fmt.Errorf("worker: Options.Concurrency must be 1..%d, got %d", maxConcurrency, opts.Concurrency)
	}
	if opts.ShutdownGrace < 0 {
		return nil, fmt.Errorf("worker: Options.ShutdownGrace must not be negative, got %v", opts.ShutdownGrace)
	}
	if opts.ShutdownGrace == 0 {
		opts.ShutdownGrace = defaultShutdownGrace
	}
	opts.Queues = slices.Clone(opts.Queues)
	// A channel that spreads over several brokers may take the next stream to another one.
	target, _ := conn.(interface{ Target() string })
	w := &Worker{
		client:   jobwirev1.NewWorkerServiceClient(protocodec.Conn(conn)),
		movable:  opts.Movable || (target != nil && brokerset.Spans(target.Target())),
		opts:     opts,
		log:      opts.Logger,
		clock:    opts.Clock,
		slots:    make(chan struct{}, opts.Concurrency),
		handlers: make(map[string]HandlerFunc),
		tasks:    make(map[leaseRef]*task),
		stopped:  make(chan struct{}),
	}
	if w.log == nil {
		w.log = slog.Default()
	}
	w.log = w.log.With("worker_id", opts.ID)
	if w.clock == nil {
		w.clock = clock.Real{}
	}
	return w, nil
}

// RegisterError names a sentinel error, such as one made with errors.New, for the failures
// this worker reports: a handler error whose chain holds sentinel (and no error with a name of
// its own deeper in it) is reported with error type name instead of the plain "error", so
// the dead-letter queue groups it under that name. Use the variable's name:
//
//	var ErrNoRecipient = errors.New("no recipient")
//	w.RegisterError("ErrNoRecipient", ErrNoRecipient)
//
// Like Handle, it must be called before Run; it panics on a nil or uncomparable sentinel, an
// empty name, or a call after Run started.
func (w *Worker) RegisterError(name string, sentinel error) {
	if name == "" || sentinel == nil || !reflect.TypeOf(sentinel).Comparable() {
		panic("worker: RegisterError needs a name and a comparable, non-nil sentinel")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running {
		panic("worker: RegisterError called after Run")
	}
	if w.sentinels == nil {
		w.sentinels = make(map[error]string)
	}
	w.sentinels[sentinel] = name
}

// Handle registers fn for jobType. The broker only assigns job types that have a handler, so
// every Handle call must come before Run. Handle panics on an empty type, a nil fn, a type
// registered twice, or a call after Run started, because each is a programming error.
func (w *Worker) Handle(jobType string, fn HandlerFunc) {
	if jobType == "" {
		panic("worker: empty job type")
	}
	if fn == nil {
		panic("worker: nil handler for job type " + jobType)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running {
		panic("worker: Handle called after Run")
	}
	if _, dup := w.handlers[jobType]; dup {
		panic("worker: job type registered twice: " + jobType)
	}
	w.handlers[jobType] = fn
}

// Run connects to the broker and runs jobs until ctx is cancelled, reconnecting with backoff
// whenever the stream breaks. When ctx is cancelled it shuts down gracefully (see
// Options.ShutdownGrace) and returns nil once every held job is settled, or an error if the
// grace ran out first. It returns early with an error if the broker rejects the session itself
// (codes.Unimplemented or codes.InvalidArgument before Welcome), or the worker's token
// (codes.Unauthenticated: missing, unknown or revoked; codes.PermissionDenied: a role or scope
// that does not cover what the worker serves), and when the connection cannot be made secure (a
// failed TLS handshake, or TLS on one side only): those come back as a *client.ConnectError that
// says what to fix, matching client.ErrAuth or client.ErrTLS. A broker that is down or
// restarting is waited for. A Worker runs only once.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return errors.New("worker: Run called twice")
	}
	if len(w.handlers) == 0 {
		w.mu.Unlock()
		return errors.New("worker: no handlers registered")
	}
	w.running = true
	for t := range w.handlers {
		w.jobTypes = append(w.jobTypes, t)
	}
	slices.Sort(w.jobTypes)
	w.handlerBase = context.WithoutCancel(ctx)
	w.mu.Unlock()

	// Streams outlive ctx during shutdown so results can still be delivered; they are cut
	// when the shutdown runs out of time.
	streams, stopStreams := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopStreams(nil)

	returned := make(chan struct{})
	watcherDone := make(chan struct{})
	go func() {
		defer close(watcherDone)
		select {
		case <-ctx.Done():
			w.beginShutdown(stopStreams)
		case <-returned:
		}
	}()
	defer func() {
		close(returned)
		<-watcherDone
		w.mu.Lock()
		for _, t := range w.graceTimers {
			t.Stop()
		}
		w.mu.Unlock()
	}()

	attempt := 0
	for {
		if w.isStopped() {
			return nil
		}
		if streams.Err() != nil {
			return w.incomplete()
		}
		welcomed, err := w.runSession(streams)
		if w.isStopped() {
			return nil
		}
		if streams.Err() != nil {
			return w.incomplete()
		}
		if !welcomed {
			if ce := client.Classify(err); ce != nil {
				return w.abort(ce)
			}
			if isPermanent(err) {
				return w.abort(err)
			}
		}
		if welcomed {
			attempt = 0
		}
		delay := w.opts.ReconnectBackoff.Delay(attempt)
		attempt++
		w.log.Warn("worker: stream ended, reconnecting", "error", err, "delay", delay)
		w.sleep(streams, delay)
	}
}

// isPermanent reports whether a session error means reconnecting cannot help: the broker does not
// serve the protocol, rejected what this worker announced in Hello, or refused its token.
func isPermanent(err error) bool {
	switch status.Code(err) {
	case codes.Unimplemented, codes.InvalidArgument, codes.Unauthenticated, codes.PermissionDenied:
		return true
	}
	return false
}

// sleep waits d, or less if streams are cut or the worker finished stopping.
func (w *Worker) sleep(streams context.Context, d time.Duration) {
	fired := make(chan struct{})
	t := w.clock.AfterFunc(d, func() { close(fired) })
	defer t.Stop()
	select {
	case <-fired:
	case <-streams.Done():
	case <-w.stopped:
	}
}

func (w *Worker) isStopped() bool {
	select {
	case <-w.stopped:
		return true
	default:
		return false
	}
}

// beginShutdown starts a graceful shutdown: no new work, jobs that never started are handed back,
// running handlers get ShutdownGrace before their contexts are cancelled, and streams are cut
// after another ShutdownGrace.
func (w *Worker) beginShutdown(stopStreams context.CancelCauseFunc) {
	grace := w.opts.ShutdownGrace
	w.mu.Lock()
	w.log.Info("worker: shutting down", "grace", grace, "held", len(w.tasks))
	w.stopping = true
	if s := w.sess; s != nil && s.ready {
		s.put(outMsg{req: drainMsg()})
	}
	for _, t := range w.tasks {
		if t.state == stateLeased {
			t.cancel(ErrShutdown)
		}
	}
	w.graceTimers = append(w.graceTimers,
		w.clock.AfterFunc(grace, func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, t := range w.tasks {
				t.cancel(ErrShutdown)
			}
		}),
		w.clock.AfterFunc(2*grace, func() {
			stopStreams(ErrShutdown)
		}),
	)
	w.checkLocked()
	w.mu.Unlock()
	if w.hooks.shutdownStarted != nil {
		w.hooks.shutdownStarted()
	}
}

// incomplete is Run's answer when the shutdown ran out of time.
func (w *Worker) incomplete() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Errorf("worker: shutdown grace ran out with %d jobs unsettled and %d handlers running", len(w.tasks), w.active)
}

// abort stops after the broker rejected the session: every handler is cancelled, and Run waits up
// to ShutdownGrace for them to return.
func (w *Worker) abort(err error) error {
	var ce *client.ConnectError
	if errors.As(err, &ce) {
		err = fmt.Errorf("worker: cannot connect to the broker: %w", err)
	} else {
		err = fmt.Errorf("worker: broker rejected the session: %w", err)
	}
	w.log.Error("worker: giving up", "error", err)
	cause := fmt.Errorf("%w: %w", ErrShutdown, err)
	w.mu.Lock()
	for ref, t := range w.tasks {
		t.cancel(cause)
		delete(w.tasks, ref)
	}
	w.checkLocked()
	w.mu.Unlock()

	deadline := make(chan struct{})
	timer := w.clock.AfterFunc(w.opts.ShutdownGrace, func() { close(deadline) })
	defer timer.Stop()
	for {
		w.mu.Lock()
		idle, changed := w.active == 0, w.changedLocked()
		w.mu.Unlock()
		if idle {
			return err
		}
		select {
		case <-changed:
		case <-deadline:
			return err
		}
	}
}

// checkLocked must follow every change of tasks or active: it wakes waiters and ends a stream that
// has nothing left to do.
func (w *Worker) checkLocked() {
	if w.changed != nil {
		close(w.changed)
		w.changed = nil
	}
	if len(w.tasks) > 0 || w.active > 0 {
		return
	}
	if w.stopping && !w.stoppedClosed {
		w.stoppedClosed = true
		close(w.stopped)
	}
	if s := w.sess; s != nil && (w.stopping || s.draining) && !s.finishing {
		s.finishing = true
		if s.ready {
			s.box.close()
		}
		// A broker that never ends the stream (or never answers Hello) must not hold the
		// worker forever.
		s.finishTimer = w.clock.AfterFunc(closeWait, func() { s.cancel(errCloseTimeout) })
	}
}

// changedLocked returns a channel closed at the next change of tasks or active.
func (w *Worker) changedLocked() chan struct{} {
	if w.changed == nil {
		w.changed = make(chan struct{})
	}
	return w.changed
}

// heldLocked lists the leases the worker holds, for Hello, in a stable order: every job it
// runs or holds a result of, then the jobs it is handing back (never started) while the list
// stays within its capacity, to which the broker holds a Hello. The worker can hold more: an
// assignment that finds it at capacity (its finished jobs count until their results are
// acknowledged) is held until its Release is on the wire, and a broker refused the whole
// session when a reconnect came in between. One left out is still handed back once the new
// stream is welcomed (onWelcome); never started, it spends no attempt.
func (w *Worker) heldLocked() []*jobwirev1.LeaseRef {
	var held, handingBack []*jobwirev1.LeaseRef
	for _, r := range w.sortedRefsLocked() {
		if w.tasks[r].state == stateReleasing {
			handingBack = append(handingBack, r.proto())
		} else {
			held = append(held, r.proto())
		}
	}
	room := max(w.opts.Concurrency-len(held), 0)
	return append(held, handingBack[:min(room, len(handingBack))]...)
}

func (w *Worker) sortedRefsLocked() []leaseRef {
	refs := make([]leaseRef, 0, len(w.tasks))
	for r := range w.tasks {
		refs = append(refs, r)
	}
	slices.SortFunc(refs, func(a, b leaseRef) int {
		if a.jobID != b.jobID {
			return compareInt64(a.jobID, b.jobID)
		}
		return strings.Compare(a.token, b.token)
	})
	return refs
}

func compareInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// readySessionLocked is the session messages can be sent on, or nil between streams.
func (w *Worker) readySessionLocked() *session {
	if s := w.sess; s != nil && s.ready {
		return s
	}
	return nil
}
