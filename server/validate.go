package server

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// Limits bound what a request may ask for.
type Limits struct {
	// MaxPayload is the largest payload accepted, in bytes.
	MaxPayload int
	// MaxBatch is the most jobs one EnqueueBatch may carry.
	MaxBatch int
	// MaxScheduleAhead is how far in the future a job may be scheduled.
	MaxScheduleAhead time.Duration
	// MaxWorkerStreams caps the worker streams open at once, across connections: each costs
	// memory and a place in every dispatch round. Zero: 1000.
	MaxWorkerStreams int
	// MaxWorkerStreamsPerToken caps, with auth on, the worker streams one token may have open
	// at once, so that one token cannot take every place MaxWorkerStreams leaves. Zero: 250.
	MaxWorkerStreamsPerToken int
	// MaxStreamMessageRate caps the messages per second one worker stream may send, with a
	// burst of one second's worth. Zero: 50,000, well above what one stream sends at full
	// speed (two messages a job).
	MaxStreamMessageRate int
	// EnqueueStreamIdle ends an enqueue stream (EnqueueStream) that carried no request for
	// this long, between requests, as a shutdown does: each idle stream holds the broker's
	// memory and goroutines, and a producer whose burst is over need not keep the streams it
	// opened for it. Zero: DefaultEnqueueStreamIdle.
	EnqueueStreamIdle time.Duration
}

// DefaultEnqueueStreamIdle is Limits.EnqueueStreamIdle unless configured: long enough that a
// producer enqueueing now and then keeps its stream, shorter than proxies' own idle timeouts
// of a stream (Envoy's is five minutes), so the broker ends a stream cleanly before they reset
// it.
const DefaultEnqueueStreamIdle = 2 * time.Minute

// DefaultLimits: 1 MiB payloads, 10,000 jobs a batch, scheduling up to 366 days ahead, 1000
// worker streams, 250 of them per token, 50,000 messages a second per stream, enqueue streams
// ended after 2 minutes without a request.
func DefaultLimits() Limits {
	return Limits{MaxPayload: 1 << 20, MaxBatch: 10000, MaxScheduleAhead: 366 * 24 * time.Hour,
		MaxWorkerStreams: 1000, MaxWorkerStreamsPerToken: DefaultMaxWorkerStreamsPerToken, MaxStreamMessageRate: 50000,
		EnqueueStreamIdle: DefaultEnqueueStreamIdle}
}

// DefaultMaxWorkerStreamsPerToken is Limits.MaxWorkerStreamsPerToken unless configured: a
// quarter of the streams a broker serves, so a fleet of a few hundred workers may share a
// token, and no token holds more than a quarter of the places.
const DefaultMaxWorkerStreamsPerToken = 250

// withDefaults fills the stream limits left zero.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxWorkerStreams == 0 {
		l.MaxWorkerStreams = d.MaxWorkerStreams
	}
	if l.MaxWorkerStreamsPerToken == 0 {
		l.MaxWorkerStreamsPerToken = d.MaxWorkerStreamsPerToken
	}
	if l.MaxStreamMessageRate == 0 {
		l.MaxStreamMessageRate = d.MaxStreamMessageRate
	}
	if l.EnqueueStreamIdle == 0 {
		l.EnqueueStreamIdle = d.EnqueueStreamIdle
	}
	return l
}

// Bounds of a worker stream's messages (docs/security.md, "Limits"). Names, held leases and
// heartbeat refs each cost the broker memory and work per dispatch round, so a single Hello or
// Heartbeat must not be able to ask for unbounded amounts of either.
const (
	// maxHelloTypes and maxHelloQueues bound the job types and queues one worker serves.
	maxHelloTypes  = 1000
	maxHelloQueues = 1000
)

const (
	maxNameLen     = 255
	minPriority    = -1000
	maxPriority    = 1000
	maxAttemptsCap = 1000
	maxCapacity    = 10000
	maxAttemptTime = 7 * 24 * time.Hour
)

func invalid(field, format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "%s: %s", field, fmt.Sprintf(format, args...))
}

// validName checks a job type or queue name: 1..255 characters of A-Z a-z 0-9 _ . : -.
func validName(field, s string) error {
	if len(s) == 0 || len(s) > maxNameLen {
		return invalid(field, "must be 1..%d characters, got %d", maxNameLen, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			return invalid(field, "may hold only A-Z a-z 0-9 _ . : - but has %q at byte %d", c, i)
		}
	}
	return nil
}

// validateSpec checks one job spec; prefix names it in messages ("job" or "jobs[3]").
func (l Limits) validateSpec(prefix string, s *jobwirev1.JobSpec, now time.Time) error {
	if s == nil {
		return invalid(prefix, "is required")
	}
	if err := validName(prefix+".type", s.GetType()); err != nil {
		return err
	}
	if s.GetQueue() != "" {
		if err := validName(prefix+".queue", s.GetQueue()); err != nil {
			return err
		}
	}
	if n := len(s.GetPayload()); n > l.MaxPayload {
		return invalid(prefix+".payload", "is %d bytes, more than the limit of %d", n, l.MaxPayload)
	}
	if p := s.GetPriority(); p < minPriority || p > maxPriority {
		return invalid(prefix+".priority", "must be %d..%d, got %d", minPriority, maxPriority, p)
	}
	switch sched := s.GetSchedule().(type) {
	case *jobwirev1.JobSpec_RunAt:
		if err := sched.RunAt.CheckValid(); err != nil {
			return invalid(prefix+".run_at", "is not a valid time: %v", err)
		}
		if at := sched.RunAt.AsTime(); at.After(now.Add(l.MaxScheduleAhead)) {
			return invalid(prefix+".run_at", "is more than %s ahead", l.MaxScheduleAhead)
		}
	case *jobwirev1.JobSpec_Delay:
		if err := sched.Delay.CheckValid(); err != nil {
			return invalid(prefix+".delay", "is not a valid duration: %v", err)
		}
		if d := sched.Delay.AsDuration(); d < 0 || d > l.MaxScheduleAhead {
			return invalid(prefix+".delay", "must be 0..%s, got %s", l.MaxScheduleAhead, d)
		}
	}
	if n := s.GetMaxAttempts(); n < 0 || n > maxAttemptsCap {
		return invalid(prefix+".max_attempts", "must be 0 (the default) or 1..%d, got %d", maxAttemptsCap, n)
	}
	if k := s.GetIdempotencyKey(); len(k) > maxNameLen {
		return invalid(prefix+".idempotency_key", "must be at most %d characters, got %d", maxNameLen, len(k))
	}
	if err := validMetadata(prefix+".metadata", s.GetMetadata()); err != nil {
		return err
	}
	if err := validateUnique(prefix+".unique", s.GetUnique()); err != nil {
		return err
	}
	if err := validateDeps(prefix, s); err != nil {
		return err
	}
	if err := validConcurrencyKey(prefix, s); err != nil {
		return err
	}
	if k := s.GetRateKey(); len(k) > maxNameLen {
		return invalid(prefix+".rate_key", "must be at most %d bytes, got %d", maxNameLen, len(k))
	}
	if t := s.GetAttemptTimeout(); t != nil {
		if err := t.CheckValid(); err != nil {
			return invalid(prefix+".attempt_timeout", "is not a valid duration: %v", err)
		}
		if d := t.AsDuration(); d < time.Second || d > maxAttemptTime {
			return invalid(prefix+".attempt_timeout", "must be 1s..%s, got %s", maxAttemptTime, d)
		}
	}
	return nil
}

func validID(field string, id int64) error {
	if id <= 0 {
		return invalid(field, "must be a positive job id, got %d", id)
	}
	return nil
}

// validateHello checks a worker's first message.
func validateHello(h *jobwirev1.Hello) error {
	if h == nil {
		return status.Error(codes.InvalidArgument, "hello: the first message on the stream must be hello")
	}
	if id := h.GetWorkerId(); len(id) == 0 || len(id) > maxNameLen {
		return invalid("hello.worker_id", "must be 1..%d characters, got %d", maxNameLen, len(id))
	}
	if len(h.GetJobTypes()) == 0 {
		return invalid("hello.job_types", "must name at least one job type")
	}
	if n := len(h.GetJobTypes()); n > maxHelloTypes {
		return invalid("hello.job_types", "names %d job types, more than the limit of %d", n, maxHelloTypes)
	}
	if n := len(h.GetQueues()); n > maxHelloQueues {
		return invalid("hello.queues", "names %d queues, more than the limit of %d", n, maxHelloQueues)
	}
	for i, t := range h.GetJobTypes() {
		if err := validName(fmt.Sprintf("hello.job_types[%d]", i), t); err != nil {
			return err
		}
	}
	for i, q := range h.GetQueues() {
		if err := validName(fmt.Sprintf("hello.queues[%d]", i), q); err != nil {
			return err
		}
	}
	if c := h.GetCapacity(); c < 1 || c > maxCapacity {
		return invalid("hello.capacity", "must be 1..%d, got %d", maxCapacity, c)
	}
	if n := len(h.GetHeld()); n > int(h.GetCapacity()) {
		return invalid("hello.held", "lists %d leases, more than the capacity of %d: a worker holds at most its capacity", n, h.GetCapacity())
	}
	return nil
}

// MaxBatchMessages is the most messages one batch frame of the worker stream may carry, in
// either direction. It bounds the work one frame asks of the broker before the message budget
// is consulted, and what a worker must be ready to unpack at once.
const MaxBatchMessages = 1024

// MaxBatchBytes is how much of encoded messages a batch frame gathers at most: a message that
// would take a frame past it starts the next one, and one larger than it travels alone. Every
// gRPC library reads at most 4 MiB a message unless told otherwise, so the messages that are
// ready together, each within that (a payload or a result of up to 1 MiB, say), never add up
// to a frame that the other end cannot read.
const MaxBatchBytes = 1 << 20

// MaxWorkerMessageBytes is the largest message the broker sends a worker unless its operator
// raised the largest it reads (Transport.MaxRecvMsgSize, which max_payload_bytes and
// max_result_bytes raise): what every gRPC library reads in one message unless told otherwise.
// An assignment larger than that (a large payload with its parents' results) is not sent: its
// job goes to the dead-letter queue as AssignmentTooLarge (broker.Session.Undeliverable).
const MaxWorkerMessageBytes = 4 << 20

// validateRequestBatch checks a worker's batch frame before any of it is applied: 1..1024
// messages, each a Started, Heartbeat, Result or Release. Hello and Drain change the stream's
// state and travel alone; a nested batch would let a frame's size escape the bound.
func validateRequestBatch(b *jobwirev1.ConnectRequestBatch) error {
	msgs := b.GetMessages()
	if len(msgs) == 0 {
		return invalid("batch.messages", "must hold at least one message")
	}
	if len(msgs) > MaxBatchMessages {
		return invalid("batch.messages", "holds %d messages, more than the limit of %d", len(msgs), MaxBatchMessages)
	}
	for i, m := range msgs {
		switch m.GetMessage().(type) {
		case *jobwirev1.ConnectRequest_Started, *jobwirev1.ConnectRequest_Heartbeat,
			*jobwirev1.ConnectRequest_Result, *jobwirev1.ConnectRequest_Release, *jobwirev1.ConnectRequest_Progress:
		case *jobwirev1.ConnectRequest_Batch:
			return invalid(fmt.Sprintf("batch.messages[%d]", i), "is a batch: batches do not nest")
		case *jobwirev1.ConnectRequest_Hello:
			return invalid(fmt.Sprintf("batch.messages[%d]", i), "is hello: hello must be the first message on the stream, alone")
		case *jobwirev1.ConnectRequest_Drain:
			return invalid(fmt.Sprintf("batch.messages[%d]", i), "is drain: drain must be sent alone")
		default:
			return invalid(fmt.Sprintf("batch.messages[%d]", i), "is empty or of an unknown type: a batch may hold only started, heartbeat, result, release and progress")
		}
	}
	return nil
}

// validateRequest checks one worker message after Hello, alone or in a batch, against the rules
// of its own: recvLoop checks every message of a frame before it applies any.
func validateRequest(m *jobwirev1.ConnectRequest, capacity int) error {
	switch m := m.GetMessage().(type) {
	case *jobwirev1.ConnectRequest_Heartbeat:
		return validateHeartbeat(m.Heartbeat, capacity)
	case *jobwirev1.ConnectRequest_Result:
		switch m.Result.GetOutcome().(type) {
		case *jobwirev1.Result_Success, *jobwirev1.Result_Failure:
		default:
			return status.Errorf(codes.InvalidArgument, "result for job %d: outcome must be success or failure", m.Result.GetJobId())
		}
	}
	return nil
}

// validateHeartbeat checks a heartbeat against the stream's capacity: a worker holds at most
// that many leases, so a longer list can only be abuse.
func validateHeartbeat(hb *jobwirev1.Heartbeat, capacity int) error {
	if n := len(hb.GetLeases()); n > capacity {
		return invalid("heartbeat.leases", "lists %d leases, more than the capacity of %d", n, capacity)
	}
	return nil
}

// Bounds of a job's metadata: enough for trace context and a few keys of the user's own.
const (
	maxMetadataKeys     = 64
	maxMetadataKeyLen   = 128
	maxMetadataValueLen = 4096
	maxMetadataBytes    = 16 << 10
)

// validMetadata checks a job's metadata: a bounded number of keys, each a name of
// [A-Za-z0-9_.:-], and bounded values.
func validMetadata(field string, m map[string]string) error {
	if len(m) > maxMetadataKeys {
		return invalid(field, "has %d keys, more than %d", len(m), maxMetadataKeys)
	}
	total := 0
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		if len(k) > maxMetadataKeyLen {
			return invalid(field, "key %q is %d characters, more than %d", k, len(k), maxMetadataKeyLen)
		}
		if err := validName(field+" key "+strconv.Quote(k), k); err != nil {
			return err
		}
		if len(v) > maxMetadataValueLen {
			return invalid(field+"["+k+"]", "is %d bytes, more than %d", len(v), maxMetadataValueLen)
		}
		if !utf8.ValidString(v) {
			return invalid(field+"["+k+"]", "is not valid UTF-8")
		}
		total += len(k) + len(v)
	}
	if total > maxMetadataBytes {
		return invalid(field, "is %d bytes in all, more than %d", total, maxMetadataBytes)
	}
	return nil
}
