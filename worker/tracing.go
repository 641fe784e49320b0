package worker

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// tracerName names the tracer of the handler spans.
const tracerName = "github.com/jobwire/jobwire/worker"

// traceContext reads the W3C trace context the producer wrote into the job's metadata.
var traceContext = propagation.TraceContext{}

// tracer is the tracer of the handler spans: the provider of Options, else the global one.
// It is looked up once per worker: a provider's Tracer takes a lock and a map lookup, a cost
// every job paid. The global provider's tracer, taken before a provider is set, follows the
// one set later.
func (w *Worker) tracer() trace.Tracer {
	w.tracerOnce.Do(func() {
		if w.opts.TracerProvider != nil {
			w.tr = w.opts.TracerProvider.Tracer(tracerName)
			return
		}
		w.tr = otel.GetTracerProvider().Tracer(tracerName)
	})
	return w.tr
}

// startProcess starts the span a handler runs in: "process <queue>", a child of the
// producer's span when the job carries its trace context, with the job's id, type and attempt.
func (w *Worker) startProcess(ctx context.Context, j *Job) (context.Context, trace.Span) {
	if len(j.Metadata) > 0 {
		ctx = traceContext.Extract(ctx, propagation.MapCarrier(j.Metadata))
	}
	return w.tracer().Start(ctx, "process "+j.Queue, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("messaging.system", "jobwire"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", j.Queue),
			attribute.Int64("messaging.message.id", j.ID),
			attribute.String("jobwire.job.type", j.Type),
			attribute.Int("jobwire.attempt", j.Attempt)))
}

// endProcess records the attempt's outcome on its span: "succeeded", "fatal" or "transient",
// with the error type of a failure.
func endProcess(span trace.Span, r *jobwirev1.Result) {
	switch f := r.GetFailure(); {
	case f == nil:
		span.SetAttributes(attribute.String("jobwire.outcome", "succeeded"))
	default:
		outcome := "transient"
		if f.GetKind() == jobwirev1.FailureKind_FAILURE_KIND_FATAL {
			outcome = "fatal"
		}
		span.SetAttributes(attribute.String("jobwire.outcome", outcome), attribute.String("error.type", f.GetErrorType()))
		span.SetStatus(codes.Error, f.GetMessage())
	}
	span.End()
}
