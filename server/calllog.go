package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// callLog logs every finished call, at a level its status code decides (callLevel): the
// fields of go-grpc-middleware's logging interceptor, which this replaced, under the same
// names. That interceptor builds its fields, and puts them in the call's context, before the
// call and whatever its level: with OK calls logged at debug and the broker at info, that was
// about a tenth of the CPU of an Enqueue round trip, client and server together
// (BenchmarkEnqueueAuth's profile), for lines never written. Here nothing is built unless the
// logger takes the call's level (TestCallLogBuildsNothingItDoesNotWrite).
type callLog struct{ log *slog.Logger }

// callLevel is the level a call ending with code c is logged at: the codes a client asks for
// in the normal course of things at debug, the broker's own failures at error, the rest
// (refused requests) at info.
func callLevel(c codes.Code) slog.Level {
	switch c {
	case codes.OK, codes.Canceled, codes.NotFound, codes.AlreadyExists:
		return slog.LevelDebug
	case codes.Internal, codes.Unknown, codes.DataLoss:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (l callLog) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := next(ctx, req)
	l.finished(ctx, info.FullMethod, "unary", start, err)
	return resp, err
}

func (l callLog) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	start := time.Now()
	err := next(srv, ss)
	kind := "server_stream"
	switch {
	case info.IsClientStream && info.IsServerStream:
		kind = "bidi_stream"
	case info.IsClientStream:
		kind = "client_stream"
	}
	l.finished(ss.Context(), info.FullMethod, kind, start, err)
	return err
}

// finished logs a call that ended with err, if the logger takes the level its code is logged at.
func (l callLog) finished(ctx context.Context, fullMethod, kind string, start time.Time, err error) {
	if errors.Is(err, io.EOF) {
		err = nil
	}
	code := status.Code(err)
	level := callLevel(code)
	if !l.log.Enabled(ctx, level) {
		return
	}
	service, method, _ := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	attrs := []slog.Attr{
		slog.String("protocol", "grpc"),
		slog.String("grpc.component", "server"),
		slog.String("grpc.service", service),
		slog.String("grpc.method", method),
		slog.String("grpc.method_type", kind),
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		attrs = append(attrs, slog.String("peer.address", p.Addr.String()))
	}
	attrs = append(attrs,
		slog.String("grpc.start_time", start.Format(time.RFC3339)),
		slog.String("grpc.code", code.String()))
	if err != nil {
		attrs = append(attrs, slog.String("grpc.error", err.Error()))
	}
	attrs = append(attrs, slog.Float64("grpc.time_ms", float64(time.Since(start).Microseconds())/1000))
	l.log.LogAttrs(ctx, level, "finished call", attrs...)
}
