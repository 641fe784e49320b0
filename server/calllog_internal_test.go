package server

import (
	"context"
	"log/slog"
	"sync"
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
		h := &LogRecords{Level: slog.LevelDebug}
		l := callLog{log: slog.New(h)}
		info := &grpc.StreamServerInfo{FullMethod: "/s.S/M", IsClientStream: tc.client, IsServerStream: tc.server}
		_ = l.stream(nil, stubStream{ctx: context.Background()}, info, func(any, grpc.ServerStream) error {
			return status.Error(codes.Internal, "boom")
		})
		got := h.Calls("M")
		if len(got) != 1 || got[0]["grpc.method_type"] != tc.want || got[0]["level"] != "ERROR" || got[0]["grpc.code"] != "Internal" {
			t.Errorf("client %v server %v: logged %v, want one %s at ERROR, Internal", tc.client, tc.server, got, tc.want)
		}
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// LogRecords is a slog.Handler that keeps what it is given from Level up, for the call log's
// tests here and in package server_test.
type LogRecords struct {
	Level slog.Level
	mu    sync.Mutex
	got   []slog.Record
}

func (r *LogRecords) Enabled(_ context.Context, l slog.Level) bool { return l >= r.Level }
func (r *LogRecords) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, rec.Clone())
	return nil
}
func (r *LogRecords) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *LogRecords) WithGroup(string) slog.Handler      { return r }

// Calls returns the "finished call" lines for method, each as its level and attributes.
func (r *LogRecords) Calls(method string) []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]string
	for _, rec := range r.got {
		if rec.Message != "finished call" {
			continue
		}
		m := map[string]string{"level": rec.Level.String()}
		rec.Attrs(func(a slog.Attr) bool {
			m[a.Key] = a.Value.String()
			return true
		})
		if m["grpc.method"] == method {
			out = append(out, m)
		}
	}
	return out
}

// stubStream is a grpc.ServerStream with a context and nothing else.
type stubStream struct{ ctx context.Context }

func (s stubStream) Context() context.Context   { return s.ctx }
func (stubStream) SetHeader(metadata.MD) error  { return nil }
func (stubStream) SendHeader(metadata.MD) error { return nil }
func (stubStream) SetTrailer(metadata.MD)       {}
func (stubStream) SendMsg(any) error            { return nil }
func (stubStream) RecvMsg(any) error            { return nil }
