package client

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job"
)

// Tracing: Enqueue and EnqueueBatch record a "send <queue>" producer span and write its W3C
// trace context into each job's metadata ("traceparent", "tracestate"). The broker stores it
// unchanged and hands it to the worker, whose SDK makes the handler's span a child of it, so one
// trace runs from the producer to the handler.

// tracerName names the tracer of this package's spans.
const tracerName = "github.com/jobwire/jobwire/client"

// traceContext is the propagator for job metadata: W3C trace context, whatever propagator
// the program set globally, so every SDK reads the same keys.
var traceContext = propagation.TraceContext{}

// Option configures New (and Dial, as a DialOption).
type Option interface {
	DialOption
	applyClient(*Client)
}

type tracerOption struct{ tp trace.TracerProvider }

func (o tracerOption) applyClient(c *Client) { c.tracer = o.tp.Tracer(tracerName) }

func (o tracerOption) applyDial(c *dialConfig) { c.clientOpts = append(c.clientOpts, o) }

// WithTracerProvider sets where the client's spans go. Without it the global provider
// (otel.GetTracerProvider) is used, which records nothing until the program sets one.
func WithTracerProvider(tp trace.TracerProvider) Option { return tracerOption{tp} }

func (c *Client) tracerOrGlobal() trace.Tracer {
	if c.tracer != nil {
		return c.tracer
	}
	return otel.GetTracerProvider().Tracer(tracerName)
}

// startSend starts the producer span of an enqueue and writes its context into the specs'
// metadata. A context without a recording span still passes on a trace it carries.
func (c *Client) startSend(ctx context.Context, specs []*jobwirev1.JobSpec) (context.Context, trace.Span) {
	queue := job.QueueOrDefault(specs[0].GetQueue())
	ctx, span := c.tracerOrGlobal().Start(ctx, "send "+queue, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", "jobwire"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", queue),
			attribute.String("jobwire.job.type", specs[0].GetType()),
			attribute.Int("messaging.batch.message_count", len(specs))))
	// Without a valid span context (no span recorded and no trace carried in) Inject writes
	// nothing: the specs' metadata is left as it is, and no map is made per job to find that out.
	if !span.SpanContext().IsValid() {
		return ctx, span
	}
	for _, s := range specs {
		if s.Metadata == nil {
			s.Metadata = map[string]string{}
		}
		traceContext.Inject(ctx, propagation.MapCarrier(s.Metadata))
		if len(s.Metadata) == 0 {
			s.Metadata = nil
		}
	}
	return ctx, span
}

// endSend ends the producer span with the job ids or the error.
func endSend(span trace.Span, ids []int64, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	} else if len(ids) == 1 {
		span.SetAttributes(attribute.Int64("messaging.message.id", ids[0]))
	}
	span.End()
}
