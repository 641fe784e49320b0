package server_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/server"
)

// TestCallLog checks, through a real server, that a finished call is logged at the level its
// code decides, with the call's service, method, kind, code and error, and that an OK call is
// logged at debug only.
func TestCallLog(t *testing.T) {
	for _, tc := range []struct {
		name  string
		level slog.Level
		spec  *jobwirev1.JobSpec
		want  map[string]string // nil: no record
	}{
		{"ok at info", slog.LevelInfo, &jobwirev1.JobSpec{Type: "t"}, nil},
		{"ok at debug", slog.LevelDebug, &jobwirev1.JobSpec{Type: "t"},
			map[string]string{"level": "DEBUG", "grpc.code": "OK"}},
		{"refused at info", slog.LevelInfo, &jobwirev1.JobSpec{Type: ""},
			map[string]string{"level": "INFO", "grpc.code": "InvalidArgument", "grpc.error": "type"}},
		{"refused at warn", slog.LevelWarn, &jobwirev1.JobSpec{Type: ""}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &server.LogRecords{Level: tc.level}
			b := brokertest.New(t, brokertest.Options{Logger: slog.New(h)})
			_, _ = b.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{Job: tc.spec})
			got := h.Calls("Enqueue")
			if tc.want == nil {
				if len(got) != 0 {
					t.Fatalf("logged %v, want nothing", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("logged %d finished calls of Enqueue (%v), want 1", len(got), got)
			}
			rec := got[0]
			want := map[string]string{"grpc.service": "jobwire.v1.ProducerService", "grpc.method_type": "unary",
				"grpc.component": "server", "protocol": "grpc"}
			for k, v := range tc.want {
				want[k] = v
			}
			for k, v := range want {
				if k == "grpc.error" {
					if !strings.Contains(rec[k], v) {
						t.Errorf("%s = %q, want it to name %q", k, rec[k], v)
					}
					continue
				}
				if rec[k] != v {
					t.Errorf("%s = %q, want %q (record %v)", k, rec[k], v, rec)
				}
			}
			for _, k := range []string{"peer.address", "grpc.start_time", "grpc.time_ms"} {
				if rec[k] == "" {
					t.Errorf("no %s in %v", k, rec)
				}
			}
		})
	}
}
