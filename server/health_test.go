package server_test

import (
	"context"
	"slices"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/jobwire/jobwire/internal/brokertest"
)

func TestHealthAndReflection(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	for _, svc := range []string{"", "jobwire.v1.ProducerService", "jobwire.v1.WorkerService", "jobwire.v1.AdminService"} {
		res, err := healthpb.NewHealthClient(b.Conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health of %q: %v %v", svc, res, err)
		}
	}
	stream, err := reflectionpb.NewServerReflectionClient(b.Conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	res, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range res.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"jobwire.v1.ProducerService", "jobwire.v1.WorkerService", "jobwire.v1.AdminService", "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}
}
