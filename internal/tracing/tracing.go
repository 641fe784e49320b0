// Package tracing sets up the broker's OpenTelemetry trace export from the standard OTEL_*
// environment variables. It is off unless they ask for it.
package tracing

import (
	"context"
	"fmt"
	"os"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// Enabled reports whether the environment asks for trace export: OTEL_TRACES_EXPORTER=otlp, or
// an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) without
// OTEL_TRACES_EXPORTER=none. OTEL_SDK_DISABLED=true turns it off.
func Enabled(getenv func(string) string) bool {
	if getenv("OTEL_SDK_DISABLED") == "true" {
		return false
	}
	switch getenv("OTEL_TRACES_EXPORTER") {
	case "otlp":
		return true
	case "none":
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// FromEnv returns a tracer provider exporting over OTLP/gRPC as the OTEL_* variables say
// (endpoint, headers, TLS, sampler, service name), or nil when Enabled is false. Call
// shutdown at exit to flush the spans still buffered.
func FromEnv(ctx context.Context) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	if !Enabled(os.Getenv) {
		return nil, func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName("jobwire")))
	if err != nil {
		res = resource.Default()
	}
	if os.Getenv("OTEL_SERVICE_NAME") != "" {
		res = resource.Default() // the variable names the service; Default reads it
	}
	p := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return p, p.Shutdown, nil
}
