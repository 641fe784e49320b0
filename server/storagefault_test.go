package server_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/store/sqlite"
	"github.com/jobwire/jobwire/store/storeretry"
	sqlite3 "modernc.org/sqlite/lib"
)

// A disk that fails, fills up or turns read-only reaches producers as UNAVAILABLE (worth a retry
// once an operator fixed it) with a sentence naming the code; corruption stays INTERNAL.
func TestStorageFaultsReachClientsAsUnavailable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code int
		want codes.Code
	}{
		{sqlite3.SQLITE_IOERR_WRITE, codes.Unavailable},
		{sqlite3.SQLITE_IOERR, codes.Unavailable},
		{sqlite3.SQLITE_READONLY, codes.Unavailable},
		{sqlite3.SQLITE_READONLY_DIRECTORY, codes.Unavailable},
		{sqlite3.SQLITE_FULL, codes.Unavailable},
		{sqlite3.SQLITE_CANTOPEN, codes.Unavailable},
		{sqlite3.SQLITE_PERM, codes.Unavailable},
		{sqlite3.SQLITE_CORRUPT, codes.Internal},
	}
	for _, tt := range tests {
		name := sqlite.CodeName(tt.code)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := brokertest.NewFaults(t, brokertest.DefaultFaultRetries)
			f.FailWith(tt.code)
			f.InjectEveryCall(brokertest.FaultBefore, 1000, "enqueue", "job_get")
			b := brokertest.New(t, brokertest.Options{Faults: f})
			ctx := context.Background()
			_, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "t"}})
			checkFault(t, "enqueue", err, tt.want, name)
			_, err = b.Producer.GetJob(ctx, &jobwirev1.GetJobRequest{Id: 1})
			checkFault(t, "get job", err, tt.want, name)
			if tries := f.Tries("enqueue"); tries != 1 {
				t.Errorf("enqueue tried %d times, want 1: retrying at once cannot help", tries)
			}
		})
	}
}

func checkFault(t *testing.T, what string, err error, want codes.Code, code string) {
	t.Helper()
	msg := status.Convert(err).Message()
	if status.Code(err) != want || !strings.Contains(msg, code) {
		t.Errorf("%s: %v; want %s naming %s", what, err, want, code)
	}
	if want == codes.Unavailable && !strings.Contains(msg, "storage unavailable ("+code+")") ||
		want == codes.Unavailable && !strings.Contains(msg, "the call was not applied: retry it once the broker's storage is back") {
		t.Errorf("%s: message %q does not say the storage is unavailable and what to do", what, msg)
	}
}

// A caller whose deadline comes before the storage retry's next try is answered at once with
// UNAVAILABLE saying so, instead of waiting past its deadline for an answer nobody hears; a
// caller without a deadline still has the whole retry budget.
func TestStorageRetryStopsAtTheCallersDeadline(t *testing.T) {
	t.Parallel()
	// The waits between tries are an hour, and end only when the test says so.
	endWait := make(chan struct{})
	sleep := func(ctx context.Context, _ time.Duration) error {
		select {
		case <-endWait:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p, err := storeretry.New(storeretry.Config{Classify: sqlite.Classify, Rand: brokertest.NewRand(), Sleep: sleep,
		Logger:  slog.New(slog.DiscardHandler),
		Options: storeretry.Options{MaxTransientRetries: 3, TransientRetryBaseDelay: time.Hour, CommandTimeout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	f := brokertest.NewFaultsWithPolicy(p)
	f.InjectEveryCall(brokertest.FaultBefore, 2, "enqueue")
	b := brokertest.New(t, brokertest.Options{Faults: f})
	var once sync.Once
	end := func() { once.Do(func() { close(endWait) }) }
	t.Cleanup(end) // before the broker stops, so no wait outlives the test
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.WaitTimeout)
	defer cancel()
	_, err = b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "t"}})
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.Unavailable || !strings.Contains(msg, "SQLITE_BUSY") ||
		!strings.Contains(msg, "stopped retrying: the caller's deadline is") {
		t.Fatalf("enqueue with a deadline before the next try: %v; want UNAVAILABLE saying retries stopped for the deadline", err)
	}
	if tries := f.Tries("enqueue"); tries != 1 {
		t.Fatalf("enqueue tried %d times, want 1", tries)
	}
	// Without a deadline the same trouble is waited out: the retries run once the waits end,
	// and the job is stored.
	done := make(chan error, 1)
	go func() {
		_, err := b.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "t"}})
		done <- err
	}()
	brokertest.WaitFor(t, "the enqueue to be retried", func() bool { return f.Tries("enqueue") >= 2 })
	end()
	if err := <-done; err != nil {
		t.Fatalf("enqueue without a deadline: %v", err)
	}
}
