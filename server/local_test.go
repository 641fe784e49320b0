package server_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// The in-process connection runs the same handlers and validation as the network.
func TestLocalConnCallsTheServices(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	local := b.Server.LocalConn()
	producer, admin := jobwirev1.NewProducerServiceClient(local), jobwirev1.NewAdminServiceClient(local)

	res, err := producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "email.send", Payload: []byte(`{}`)}})
	if err != nil {
		t.Fatal(err)
	}
	// What the local call stored, the network sees.
	got, err := b.Producer.GetJob(ctx, &jobwirev1.GetJobRequest{Id: res.GetJob().GetId()})
	if err != nil || got.GetJob().GetType() != "email.send" {
		t.Fatalf("GetJob over the network = %v, %v", got, err)
	}
	if _, err := admin.PauseQueue(ctx, &jobwirev1.PauseQueueRequest{Queue: "default"}); err != nil {
		t.Fatal(err)
	}
	qs, err := b.Admin.ListQueues(ctx, &jobwirev1.ListQueuesRequest{})
	if err != nil || len(qs.GetQueues()) != 1 || !qs.GetQueues()[0].GetPaused() {
		t.Fatalf("ListQueues over the network = %v, %v; want default paused", qs, err)
	}

	tests := []struct {
		name string
		call func() error
		code codes.Code
	}{
		{"validation runs", func() error {
			_, err := producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "bad type!"}})
			return err
		}, codes.InvalidArgument},
		{"domain errors map", func() error {
			_, err := producer.GetJob(ctx, &jobwirev1.GetJobRequest{Id: 999})
			return err
		}, codes.NotFound},
		{"streams are not served", func() error {
			_, err := jobwirev1.NewWorkerServiceClient(local).Connect(ctx)
			return err
		}, codes.Unimplemented},
	}
	for _, tt := range tests {
		if err := tt.call(); status.Code(err) != tt.code {
			t.Errorf("%s: %v, want %s", tt.name, err, tt.code)
		}
	}
}

// With auth on, an in-process call needs a token in its incoming metadata, and the access
// rules apply as on the network.
func TestLocalConnAppliesAccessRules(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{RequireAuth: true})
	admin := jobwirev1.NewAdminServiceClient(b.Server.LocalConn())
	as := func(token string) context.Context {
		if token == "" {
			return context.Background()
		}
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+token))
	}
	viewer := b.Token(auth.RoleViewer, auth.Scope{})
	tests := []struct {
		name  string
		token string
		call  func(ctx context.Context) error
		code  codes.Code
	}{
		{"no token", "", func(ctx context.Context) error {
			_, err := admin.ListQueues(ctx, &jobwirev1.ListQueuesRequest{})
			return err
		}, codes.Unauthenticated},
		{"viewer reads", viewer, func(ctx context.Context) error {
			_, err := admin.ListQueues(ctx, &jobwirev1.ListQueuesRequest{})
			return err
		}, codes.OK},
		{"viewer cannot pause", viewer, func(ctx context.Context) error {
			_, err := admin.PauseQueue(ctx, &jobwirev1.PauseQueueRequest{Queue: "q"})
			return err
		}, codes.PermissionDenied},
		{"admin pauses", b.AdminToken, func(ctx context.Context) error {
			_, err := admin.PauseQueue(ctx, &jobwirev1.PauseQueueRequest{Queue: "q"})
			return err
		}, codes.OK},
	}
	for _, tt := range tests {
		if err := tt.call(as(tt.token)); status.Code(err) != tt.code {
			t.Errorf("%s: %v, want %s", tt.name, err, tt.code)
		}
	}
}
