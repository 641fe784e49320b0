package broker

import (
	"context"
	"testing"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// BenchmarkHubHandOver is the hub's part of a wait on 10,000 jobs that end one by one: the
// watch added, each job's end handed over (finished), taken by the waiter a few hundred at a
// time (Changed, then Stop of the jobs it read: none here) and the watch closed. The broker's
// CPU for a wait around it (the first look, the sending) is BenchmarkWaitOn10kJobs's, in server.
//
//	go test ./broker -run '^$' -bench HubHandOver
func BenchmarkHubHandOver(b *testing.B) {
	ids := make([]int64, 10_000)
	snaps := make([]*job.Job, len(ids))
	for i := range ids {
		ids[i] = int64(1_000_000 + i)
		snaps[i] = &job.Job{ID: ids[i], State: job.StateSucceeded}
	}
	for range b.N {
		h := &watchHub{ctx: context.Background, read: jobsAt{}, log: func(string, ...any) {},
			byJob: make(map[int64][]*JobWatch), seen: make(map[int64]store.JobVersion)}
		w := h.add(ids, WatchOptions{FinalOnly: true})
		for i, id := range ids {
			h.finished(id, func() *job.Job { return snaps[i] })
			if i%330 == 329 || i == len(ids)-1 {
				if read, known := w.Changed(); len(read) != 0 || len(known) == 0 {
					b.Fatalf("the waiter took %d to read and %d known", len(read), len(known))
				}
				w.Stop()
			}
		}
		w.Close()
		if h.watched.Load() != 0 {
			b.Fatal("jobs still watched after the watch closed")
		}
	}
}
