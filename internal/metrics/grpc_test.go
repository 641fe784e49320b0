package metrics_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/metrics"
)

// serverCounters is what both GRPC and the Prometheus provider it replaced offer a server.
type serverCounters interface {
	prometheus.Collector
	UnaryServerInterceptor() grpc.UnaryServerInterceptor
	StreamServerInterceptor() grpc.StreamServerInterceptor
}

// providerCounters adapts the provider, whose interceptor methods take options.
type providerCounters struct{ *grpcprom.ServerMetrics }

func (p providerCounters) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return p.ServerMetrics.UnaryServerInterceptor()
}

func (p providerCounters) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return p.ServerMetrics.StreamServerInterceptor()
}

// fakeStream is a server stream whose receives and sends fail as told.
type fakeStream struct {
	grpc.ServerStream
	recvErrs, sendErrs []error
}

func (s *fakeStream) Context() context.Context     { return context.Background() }
func (s *fakeStream) SetHeader(metadata.MD) error  { return nil }
func (s *fakeStream) SendHeader(metadata.MD) error { return nil }
func (s *fakeStream) SetTrailer(metadata.MD)       {}

func (s *fakeStream) RecvMsg(any) error {
	err := s.recvErrs[0]
	s.recvErrs = s.recvErrs[1:]
	return err
}

func (s *fakeStream) SendMsg(any) error {
	err := s.sendErrs[0]
	s.sendErrs = s.sendErrs[1:]
	return err
}

// exposition makes calls of every kind and ending through c's interceptors and returns
// what a scrape of c then reads.
func exposition(t *testing.T, c serverCounters, initialize func(*grpc.Server)) string {
	t.Helper()
	srv := grpc.NewServer()
	jobwirev1.RegisterProducerServiceServer(srv, jobwirev1.UnimplementedProducerServiceServer{})
	jobwirev1.RegisterWorkerServiceServer(srv, jobwirev1.UnimplementedWorkerServiceServer{})
	initialize(srv)
	unary := c.UnaryServerInterceptor()
	for _, err := range []error{nil, nil, status.Error(codes.InvalidArgument, "bad"), context.Canceled,
		context.DeadlineExceeded, errors.New("plain"), status.Error(codes.Code(40), "past the known codes")} {
		info := &grpc.UnaryServerInfo{FullMethod: jobwirev1.ProducerService_Enqueue_FullMethodName}
		_, _ = unary(context.Background(), &jobwirev1.EnqueueRequest{}, info, func(context.Context, any) (any, error) {
			return &jobwirev1.EnqueueResponse{}, err
		})
	}
	stream := c.StreamServerInterceptor()
	info := &grpc.StreamServerInfo{FullMethod: jobwirev1.WorkerService_Connect_FullMethodName,
		IsClientStream: true, IsServerStream: true}
	ss := &fakeStream{recvErrs: []error{nil, nil, nil, errors.New("gone")}, sendErrs: []error{nil, errors.New("gone"), nil}}
	_ = stream(nil, ss, info, func(_ any, s grpc.ServerStream) error {
		for range 4 {
			_ = s.RecvMsg(nil)
		}
		for range 3 {
			_ = s.SendMsg(nil)
		}
		return status.Error(codes.Unavailable, "shutting down")
	})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// GRPC's counters read exactly as those of the go-grpc-middleware provider it replaced,
// after the same calls: the names, help, labels and every value (dashboards keep working).
func TestGRPCCountsAsTheProviderDid(t *testing.T) {
	ours := metrics.NewGRPC()
	theirs := grpcprom.NewServerMetrics()
	got := exposition(t, ours, func(s *grpc.Server) { ours.InitializeMetrics(s) })
	want := exposition(t, providerCounters{theirs}, func(s *grpc.Server) { theirs.InitializeMetrics(s) })
	if got != want {
		t.Errorf("scrape differs from the provider's\n--- got:\n%s\n--- want:\n%s", got, want)
	}
	for _, line := range []string{
		`grpc_server_handled_total{grpc_code="OK",grpc_method="Enqueue",grpc_service="jobwire.v1.ProducerService",grpc_type="unary"} 2`,
		`grpc_server_handled_total{grpc_code="Canceled",grpc_method="Enqueue",grpc_service="jobwire.v1.ProducerService",grpc_type="unary"} 1`,
		`grpc_server_handled_total{grpc_code="Code(40)",grpc_method="Enqueue",grpc_service="jobwire.v1.ProducerService",grpc_type="unary"} 1`,
		`grpc_server_msg_received_total{grpc_method="Connect",grpc_service="jobwire.v1.WorkerService",grpc_type="bidi_stream"} 3`,
		`grpc_server_msg_sent_total{grpc_method="Connect",grpc_service="jobwire.v1.WorkerService",grpc_type="bidi_stream"} 2`,
	} {
		if !bytes.Contains([]byte(got), []byte(line)) {
			t.Errorf("scrape lacks %s", line)
		}
	}
}

// BenchmarkGRPCUnary is the counters' cost on one request passing the unary interceptor,
// as each request of an enqueue stream does.
func BenchmarkGRPCUnary(b *testing.B) {
	for _, bc := range []struct {
		name string
		c    serverCounters
	}{{"provider", providerCounters{grpcprom.NewServerMetrics()}}, {"grpc", metrics.NewGRPC()}} {
		b.Run(bc.name, func(b *testing.B) {
			unary := bc.c.UnaryServerInterceptor()
			info := &grpc.UnaryServerInfo{FullMethod: jobwirev1.ProducerService_Enqueue_FullMethodName}
			req, resp := &jobwirev1.EnqueueRequest{}, &jobwirev1.EnqueueResponse{}
			handler := func(context.Context, any) (any, error) { return resp, nil }
			b.ReportAllocs()
			for b.Loop() {
				_, _ = unary(context.Background(), req, info, handler)
			}
		})
	}
}
