package server

import (
	"context"
	"log/slog"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestCallLogBuildsNothingItDoesNotWrite checks that a call whose level the logger does not
// take costs the log no allocation: no field is built for a line that is not written.
func TestCallLogBuildsNothingItDoesNotWrite(t *testing.T) {
	l := callLog{log: slog.New(slog.NewTextHandler(discard{}, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	ctx := context.Background()
	info := &grpc.UnaryServerInfo{FullMethod: "/jobwire.v1.ProducerService/Enqueue"}
	ok := func(context.Context, any) (any, error) { return nil, nil }
	if n := testing.AllocsPerRun(100, func() { _, _ = l.unary(ctx, nil, info, ok) }); n != 0 {
		t.Errorf("an OK call with the log at info: %v allocations, want 0", n)
	}
	sinfo := &grpc.StreamServerInfo{FullMethod: "/jobwire.v1.WorkerService/Connect", IsClientStream: true, IsServerStream: true}
	var ss grpc.ServerStream = stubStream{ctx: ctx}
	done := func(any, grpc.ServerStream) error { return nil }
	if n := testing.AllocsPerRun(100, func() { _ = l.stream(nil, ss, sinfo, done) }); n != 0 {
		t.Errorf("an OK stream with the log at info: %v allocations, want 0", n)
	}
}

// TestCallLogStreamKinds checks the kind a stream is logged as, and that a stream's failure
// is logged at its code's level.
func TestCallLogStreamKinds(t *testing.T) {
	for _, tc := range []struct {
		client, server bool
		want           string
	}{{true, true, "bidi_stream"}, {true, false, "client_stream"}, {false, true, "server_stream"}} {
		h := &capture{}
		l := callLog{log: slog.New(h)}
		info := &grpc.StreamServerInfo{FullMethod: "/s.S/M", IsClientStream: tc.client, IsServerStream: tc.server}
		_ = l.stream(nil, stubStream{ctx: context.Background()}, info, func(any, grpc.ServerStream) error {
			return status.Error(codes.Internal, "boom")
		})
		if h.kind != tc.want || h.level != slog.LevelError || h.code != "Internal" {
			t.Errorf("client %v server %v: logged kind %q level %v code %q, want %q at ERROR, Internal",
				tc.client, tc.server, h.kind, h.level, h.code, tc.want)
		}
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// capture keeps the last record's level, kind and code.
type capture struct {
	level      slog.Level
	kind, code string
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }
func (c *capture) Handle(_ context.Context, r slog.Record) error {
	c.level = r.Level
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "grpc.method_type":
			c.kind = a.Value.String()
		case "grpc.code":
			c.code = a.Value.String()
		}
		return true
	})
	return nil
}
func (c *capture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *capture) WithGroup(string) slog.Handler      { return c }

// stubStream is a grpc.ServerStream with a context and nothing else.
type stubStream struct{ ctx context.Context }

func (s stubStream) Context() context.Context   { return s.ctx }
func (stubStream) SetHeader(metadata.MD) error  { return nil }
func (stubStream) SendHeader(metadata.MD) error { return nil }
func (stubStream) SetTrailer(metadata.MD)       {}
func (stubStream) SendMsg(any) error            { return nil }
func (stubStream) RecvMsg(any) error            { return nil }
