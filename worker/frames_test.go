package worker

import (
	"slices"
	"testing"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// TestFrames: what is queued at once goes out in as few frames as the protocol allows, in
// order, and never packs a message a batch may not carry.
func TestFrames(t *testing.T) {
	started := &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Started{Started: &jobwirev1.Started{}}}
	result := &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Result{Result: &jobwirev1.Result{}}}
	heartbeat := &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Heartbeat{Heartbeat: &jobwirev1.Heartbeat{}}}
	release := &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Release{Release: &jobwirev1.Release{}}}
	progress := &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Progress{Progress: &jobwirev1.Progress{}}}
	drain := drainMsg()
	// sized is a success carrying a result of n bytes.
	sized := func(n int) *jobwirev1.ConnectRequest {
		return &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Result{Result: &jobwirev1.Result{
			Outcome: &jobwirev1.Result_Success{Success: &jobwirev1.Success{Result: make([]byte, n)}}}}}
	}
	msgs := func(reqs ...*jobwirev1.ConnectRequest) []outMsg {
		out := make([]outMsg, len(reqs))
		for i, r := range reqs {
			out[i] = outMsg{req: r}
		}
		return out
	}
	many := make([]*jobwirev1.ConnectRequest, maxBatch+3)
	for i := range many {
		many[i] = result
	}
	tests := []struct {
		name  string
		queue []outMsg
		want  []int // each frame's message count
	}{
		{"nothing", nil, nil},
		{"a lone message goes as itself", msgs(result), []int{1}},
		{"what may travel together does", msgs(started, result, heartbeat, release, progress), []int{5}},
		{"a drain goes alone and splits the run", msgs(started, result, drain, started, result), []int{2, 1, 2}},
		{"a drain at the end", msgs(result, drain), []int{1, 1}},
		{"no frame holds more than the limit", msgs(many...), []int{maxBatch, 3}},
		{"results of 300 KiB: three fit, a fourth starts the next frame",
			msgs(sized(300<<10), sized(300<<10), sized(300<<10), sized(300<<10)), []int{3, 1}},
		{"results near the result limit go one by one", msgs(sized(900<<10), sized(900<<10), sized(900<<10)), []int{1, 1, 1}},
		{"one over the byte limit goes alone, the small ones after it together",
			msgs(sized(maxBatchBytes+1), started, result), []int{1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := frames(tt.queue)
			var sizes []int
			var flat []outMsg
			for _, f := range got {
				sizes = append(sizes, len(f))
				flat = append(flat, f...)
				frame := frameOf(f)
				if len(f) > 1 && frame.SizeVT() > maxBatchBytes+16 {
					t.Errorf("a batch frame of %d bytes, more than the limit of %d", frame.SizeVT(), maxBatchBytes)
				}
				switch b := frame.GetBatch(); {
				case len(f) == 1 && frame != f[0].req:
					t.Errorf("a frame of one is %v, want the message itself", frame)
				case len(f) > 1 && len(b.GetMessages()) != len(f):
					t.Errorf("a frame of %d carries %d messages", len(f), len(b.GetMessages()))
				}
			}
			if !slices.Equal(sizes, tt.want) {
				t.Errorf("frames of %v messages, want %v", sizes, tt.want)
			}
			if len(flat) != len(tt.queue) {
				t.Fatalf("%d messages in the frames, want %d", len(flat), len(tt.queue))
			}
			for i := range flat {
				if flat[i].req != tt.queue[i].req {
					t.Fatalf("message %d out of order", i)
				}
			}
		})
	}
}
