package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/worker"
)

// One trace runs from client.Enqueue through the broker to the Go handler: the handler's span
// is a child of the producer's, and every span of the job shares its trace id.
func TestTraceFromEnqueueToHandler(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	b := brokertest.New(t, brokertest.Options{Tracer: tp.Tracer("broker")})
	c := client.New(b.Conn, client.WithTracerProvider(tp))

	handled := make(chan *worker.Job, 1)
	var handlerSpan trace.SpanContext
	w, err := worker.New(b.Conn, worker.Options{ID: "traced", Concurrency: 1, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("email.send", func(ctx context.Context, j *worker.Job) error {
		handlerSpan = trace.SpanContextFromContext(ctx)
		handled <- j
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	rootCtx, root := tp.Tracer("test").Start(context.Background(), "checkout")
	res, err := c.Enqueue(rootCtx, "email.send", []byte(`{}`), client.Queue("mail"), client.Metadata("tenant", "acme"))
	if err != nil {
		t.Fatal(err)
	}
	root.End()
	j := <-handled
	waitJob(t, b, res.ID, jobwirev1.JobState_JOB_STATE_SUCCEEDED)
	if j.Metadata["tenant"] != "acme" || j.Metadata["traceparent"] == "" {
		t.Errorf("handler saw metadata %v, want the user's key and the trace context", j.Metadata)
	}
	waitSpan(t, spans, "process mail")

	ended := spans.Ended()
	send, enqueue, deliver, process := byName(ended, "send mail"), byName(ended, "enqueue mail"), byName(ended, "deliver mail"), byName(ended, "process mail")
	for name, s := range map[string]sdktrace.ReadOnlySpan{"send": send, "enqueue": enqueue, "deliver": deliver, "process": process} {
		if s == nil {
			t.Fatalf("no %s span among %v", name, names(ended))
		}
		if s.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Errorf("%s span is in trace %s, want the producer's %s", name, s.SpanContext().TraceID(), root.SpanContext().TraceID())
		}
	}
	if send.Parent().SpanID() != root.SpanContext().SpanID() || send.SpanKind() != trace.SpanKindProducer {
		t.Errorf("send span's parent %s kind %s, want the caller's span, PRODUCER", send.Parent().SpanID(), send.SpanKind())
	}
	if process.Parent().SpanID() != send.SpanContext().SpanID() || process.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("process span's parent %s kind %s, want the send span, CONSUMER", process.Parent().SpanID(), process.SpanKind())
	}
	if handlerSpan.SpanID() != process.SpanContext().SpanID() {
		t.Error("the handler's context does not carry the process span")
	}
	want := map[attribute.Key]attribute.Value{
		"messaging.message.id": attribute.Int64Value(res.ID),
		"jobwire.job.type":     attribute.StringValue("email.send"),
		"jobwire.attempt":      attribute.IntValue(1),
		"jobwire.outcome":      attribute.StringValue("succeeded"),
	}
	have := map[attribute.Key]attribute.Value{}
	for _, kv := range process.Attributes() {
		have[kv.Key] = kv.Value
	}
	for k, v := range want {
		if have[k] != v {
			t.Errorf("process span %s = %v, want %v", k, have[k].Emit(), v.Emit())
		}
	}
}

// A failed attempt's span says how it failed.
func TestTraceRecordsAFatalOutcome(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	b := brokertest.New(t, brokertest.Options{})
	runWorkerWith(t, b, worker.Options{ID: "traced", Concurrency: 1, TracerProvider: tp}, func(w *worker.Worker) {
		w.Handle("t", func(context.Context, *worker.Job) error { return worker.Fatal(errors.New("no recipient")) })
	})
	id, err := client.New(b.Conn, client.WithTracerProvider(tp)).Enqueue(context.Background(), "t", nil)
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, b, id.ID, jobwirev1.JobState_JOB_STATE_DEAD)
	waitSpan(t, spans, "process default")
	var outcome string
	for _, kv := range byName(spans.Ended(), "process default").Attributes() {
		if kv.Key == "jobwire.outcome" {
			outcome = kv.Value.AsString()
		}
	}
	if outcome != "fatal" {
		t.Errorf("outcome %q, want fatal", outcome)
	}
}

func byName(spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	for _, s := range spans {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

// waitSpan waits until a span of that name has ended: spans end on the goroutines that made
// them, not in step with the job's state.
func waitSpan(t *testing.T, spans *tracetest.SpanRecorder, name string) {
	t.Helper()
	deadline := time.Now().Add(brokertest.WaitTimeout)
	for byName(spans.Ended(), name) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no %s span ended; have %v", name, names(spans.Ended()))
		}
		time.Sleep(2 * time.Millisecond)
	}
}
