package server

import (
	"slices"
	"testing"

	"github.com/jobwire/jobwire/job"
)

// watchParts keeps jobs in order and cuts a response at maxWatchBatch jobs or maxWatchBytes of
// results and error messages; a job larger than that goes alone.
func TestWatchParts(t *testing.T) {
	t.Parallel()
	jobs := func(n, result int) []*job.Job {
		out := make([]*job.Job, n)
		for i := range out {
			out[i] = &job.Job{Result: make([]byte, result)}
		}
		return out
	}
	tests := []struct {
		name string
		jobs []*job.Job
		want []int // jobs per response
	}{
		{"none", nil, nil},
		{"small ones share a response", jobs(3, 100), []int{3}},
		{"at the count limit", jobs(maxWatchBatch, 0), []int{maxWatchBatch}},
		{"one past the count limit", jobs(maxWatchBatch+1, 0), []int{maxWatchBatch, 1}},
		{"three of 300 KiB fit, a fourth starts the next", jobs(4, 300<<10), []int{3, 1}},
		{"errors count as results do", append(jobs(3, 300<<10), &job.Job{LastErrorMessage: string(make([]byte, 300<<10))}), []int{3, 1}},
		{"one over the byte limit goes alone", append(append(jobs(1, 10), jobs(1, maxWatchBytes+1)...), jobs(2, 10)...), []int{1, 1, 2}},
	}
	for _, tt := range tests {
		var got []int
		var seen []*job.Job
		for part := range watchParts(tt.jobs) {
			got = append(got, len(part))
			seen = append(seen, part...)
		}
		if !slices.Equal(got, tt.want) || !slices.Equal(seen, tt.jobs) {
			t.Errorf("%s: responses of %v jobs, want %v (in order: %v)", tt.name, got, tt.want, slices.Equal(seen, tt.jobs))
		}
	}
}
