package client

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job"
)

// ends is two jobs' ends as the broker sends them: one SUCCEEDED with a result, one DEAD.
func ends() *jobwirev1.JobEnds {
	return &jobwirev1.JobEnds{
		Ids:                 []int64{7, 9},
		States:              []jobwirev1.JobState{jobwirev1.JobState_JOB_STATE_SUCCEEDED, jobwirev1.JobState_JOB_STATE_DEAD},
		Attempts:            []int32{1, 3},
		FinishedAtUnixNanos: []int64{1_700_000_000_123_456_789, 0},
		Names:               []string{"mail", "default", "bulk"},
		Types:               []uint32{0, 0},
		Queues:              []uint32{1, 2},
		Details: []*jobwirev1.JobEndDetail{
			{Index: 0, Result: []byte(`{"sent":true}`)},
			{Index: 1, DeadReason: jobwirev1.DeadReason_DEAD_REASON_MAX_ATTEMPTS_EXHAUSTED, LastErrorType: "Timeout", LastErrorMessage: "smtp"},
		},
	}
}

func TestEndsFromProto(t *testing.T) {
	for _, slab := range []bool{false, true} {
		got, err := endsFromProto(ends(), slab)
		if err != nil {
			t.Fatal(err)
		}
		want := []job.Job{
			{ID: 7, Type: "mail", Queue: "default", State: job.StateSucceeded, Attempts: 1,
				FinishedAt: time.Unix(1_700_000_000, 123_456_789).UTC(), Result: []byte(`{"sent":true}`)},
			{ID: 9, Type: "mail", Queue: "bulk", State: job.StateDead, Attempts: 3,
				DeadReason: job.DeadMaxAttemptsExhausted, LastErrorType: "Timeout", LastErrorMessage: "smtp"},
		}
		if len(got) != len(want) {
			t.Fatalf("slab %t: %d jobs, want %d", slab, len(got), len(want))
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.ID != w.ID || g.Type != w.Type || g.Queue != w.Queue || g.State != w.State || g.Attempts != w.Attempts ||
				!g.FinishedAt.Equal(w.FinishedAt) || g.FinishedAt.Location() != w.FinishedAt.Location() ||
				string(g.Result) != string(w.Result) || g.DeadReason != w.DeadReason ||
				g.LastErrorType != w.LastErrorType || g.LastErrorMessage != w.LastErrorMessage {
				t.Errorf("slab %t: job %d is\n%+v\nwant\n%+v", slab, i, *g, w)
			}
		}
	}
}

// A response whose columns do not fit together is an Internal error naming what is wrong,
// never a panic or a job made up.
func TestEndsFromProtoRefusesBrokenColumns(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mangle func(*jobwirev1.JobEnds)
		msg    string
	}{
		{"a column short", func(e *jobwirev1.JobEnds) { e.Attempts = e.Attempts[:1] }, "columns differ in length"},
		{"a column long", func(e *jobwirev1.JobEnds) { e.Queues = append(e.Queues, 0) }, "columns differ in length"},
		{"a type out of range", func(e *jobwirev1.JobEnds) { e.Types[1] = 3 }, "job 9 with a name index out of range"},
		{"a queue out of range", func(e *jobwirev1.JobEnds) { e.Queues[0] = 9 }, "job 7 with a name index out of range"},
		{"a detail out of range", func(e *jobwirev1.JobEnds) { e.Details[1].Index = 2 }, "detail for index 2 of 2 jobs"},
	} {
		e := ends()
		tc.mangle(e)
		jobs, err := endsFromProto(e, true)
		if status.Code(err) != codes.Internal || !strings.Contains(status.Convert(err).Message(), tc.msg) || jobs != nil {
			t.Errorf("%s: %v, %v; want Internal: %s", tc.name, jobs, err, tc.msg)
		}
	}
}
