package server

import (
	"slices"
	"testing"

	"github.com/jobwire/jobwire/broker"
)

// frames wraps only what is ready together, only for a worker that accepts batches, and never
// more than MaxBatchMessages in one frame.
func TestFramesChunking(t *testing.T) {
	t.Parallel()
	drains := func(n int) []broker.Message {
		out := make([]broker.Message, n)
		for i := range out {
			out[i] = broker.Drain{Reason: "r"}
		}
		return out
	}
	tests := []struct {
		name    string
		n       int
		batches bool
		want    []int // messages per frame; 0 for a frame that is not a batch
	}{
		{"one message, batches accepted", 1, true, []int{0}},
		{"several, batches accepted", 3, true, []int{3}},
		{"several, batches not accepted", 3, false, []int{0, 0, 0}},
		{"at the limit", MaxBatchMessages, true, []int{MaxBatchMessages}},
		{"one over the limit", MaxBatchMessages + 1, true, []int{MaxBatchMessages, 0}},
		{"two over the limit", MaxBatchMessages + 2, true, []int{MaxBatchMessages, 2}},
	}
	for _, tt := range tests {
		var got []int
		for _, f := range frames(drains(tt.n), tt.batches) {
			got = append(got, len(f.GetBatch().GetMessages()))
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: frames of %v, want %v", tt.name, got, tt.want)
		}
	}
}
