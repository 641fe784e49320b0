package broker

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// The broker's spans join the producer's trace through the W3C trace context in a job's
// metadata, which the broker stores and hands on unchanged: "enqueue <queue>" while a job is
// stored, "deliver <queue>" when an attempt is handed to a worker. They are made only when
// Options.Tracer is set.

var traceContext = propagation.TraceContext{}

// parentOf is the producer's span context carried in metadata (none: ctx unchanged).
func parentOf(ctx context.Context, metadata map[string]string) context.Context {
	if len(metadata) == 0 {
		return ctx
	}
	return traceContext.Extract(ctx, propagation.MapCarrier(metadata))
}

// startEnqueueSpans starts one span per job being stored.
func (b *Broker) startEnqueueSpans(ctx context.Context, params []*store.JobInsertParams) []trace.Span {
	if b.tracer == nil {
		return nil
	}
	spans := make([]trace.Span, len(params))
	for i, p := range params {
		_, spans[i] = b.tracer.Start(parentOf(ctx, p.Metadata), "enqueue "+p.Queue,
			trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("messaging.system", "jobwire"),
				attribute.String("messaging.destination.name", p.Queue),
				attribute.String("jobwire.job.type", p.Type)))
	}
	return spans
}

// endEnqueueSpans ends them with the stored job ids, or the error.
func endEnqueueSpans(spans []trace.Span, results []store.JobInsertResult, err error) {
	for i, s := range spans {
		switch {
		case err != nil:
			s.RecordError(err)
			s.SetStatus(codes.Error, err.Error())
		case i < len(results):
			s.SetAttributes(attribute.Int64("messaging.message.id", results[i].ID),
				attribute.Bool("jobwire.duplicate", results[i].Duplicate))
		}
		s.End()
	}
}

// traceDelivery records the hand-out of one attempt to a worker stream.
func (b *Broker) traceDelivery(j *job.Job, attempt int, s *Session) {
	if b.tracer == nil {
		return
	}
	_, span := b.tracer.Start(parentOf(b.ctx, j.Metadata), "deliver "+j.Queue,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", "jobwire"),
			attribute.String("messaging.destination.name", j.Queue),
			attribute.String("messaging.message.id", strconv.FormatInt(j.ID, 10)),
			attribute.String("jobwire.job.type", j.Type),
			attribute.Int("jobwire.attempt", attempt),
			attribute.String("jobwire.worker.id", s.workerID)))
	span.End()
}
