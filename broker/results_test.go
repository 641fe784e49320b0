package broker

import (
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
)

func ackFor(id int64) ResultAck {
	return ResultAck{Ref: job.LeaseRef{JobID: id, Token: job.LeaseToken{Seq: id}}}
}

// Answers are kept for resultMemory and at most resultMemoryMax of them, oldest forgotten first.
func TestRecentResultsForgetOldestFirst(t *testing.T) {
	var r recentResults
	t0 := time.Unix(1000, 0)
	for i := int64(1); i <= resultMemoryMax+10; i++ {
		r.add(ackFor(i), true, t0)
	}
	if len(r.m) != resultMemoryMax {
		t.Fatalf("kept %d answers, want %d", len(r.m), resultMemoryMax)
	}
	for _, tc := range []struct {
		id   int64
		kept bool
	}{{1, false}, {10, false}, {11, true}, {resultMemoryMax + 10, true}} {
		if _, ok := r.get(ackFor(tc.id).Ref, t0); ok != tc.kept {
			t.Errorf("job %d kept = %v, want %v", tc.id, ok, tc.kept)
		}
	}
	// Past resultMemory every answer is forgotten, and a new one is kept.
	later := t0.Add(resultMemory + time.Second)
	r.add(ackFor(1), false, later)
	if len(r.m) != 1 || r.live() != 1 {
		t.Fatalf("after resultMemory: %d answers, %d in order, want 1", len(r.m), r.live())
	}
	if res, ok := r.get(ackFor(1).Ref, later); !ok || res.success {
		t.Fatalf("the new answer: %+v, %v", res, ok)
	}
}

// BenchmarkRecentResultsAtCapacity is one stored result's bookkeeping once the memory is full,
// as on a broker that has stored resultMemoryMax results within resultMemory.
func BenchmarkRecentResultsAtCapacity(b *testing.B) {
	var r recentResults
	t0 := time.Unix(1000, 0)
	for i := int64(1); i <= resultMemoryMax; i++ {
		r.add(ackFor(i), true, t0)
	}
	id := int64(resultMemoryMax)
	b.ResetTimer()
	for range b.N {
		id++
		r.add(ackFor(id), true, t0)
	}
}
