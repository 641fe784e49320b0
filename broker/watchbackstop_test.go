package broker

import (
	"context"
	"slices"
	"testing"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// jobsAt is a store.VersionReader over jobs as a map: what the backstop reads.
type jobsAt map[int64]store.JobVersion

func (s jobsAt) JobVersions(_ context.Context, ids []int64) (map[int64]store.JobVersion, error) {
	out := make(map[int64]store.JobVersion)
	for _, id := range ids {
		if v, ok := s[id]; ok {
			out[id] = v
		}
	}
	return out, nil
}

func (s jobsAt) FinalAmong(_ context.Context, ids []int64) (int, []int64, error) {
	found, final := 0, []int64(nil)
	for _, id := range ids {
		if v, ok := s[id]; ok {
			found++
			if v.State.Final() {
				final = append(final, id)
			}
		}
	}
	slices.Sort(final)
	return found, final, nil
}

func (jobsAt) JobOutcomes(context.Context, []int64) ([]*job.Job, error) { return nil, nil }

// The backstop tells a watch of each job that changed by a write no one told it of: for a
// watch of every change, a version other than the one it saw (or, unseen, a final one); for a
// watch of the end alone, which records no version, a job now final; for either, a job gone.
func TestBackstopTellsWhatChangedUntold(t *testing.T) {
	pending := store.JobVersion{State: job.StatePending}
	running := store.JobVersion{State: job.StateRunning, Attempts: 1}
	done := store.JobVersion{State: job.StateSucceeded, Attempts: 1}
	cases := []struct {
		name      string
		finalOnly bool
		watched   []int64
		saw       map[int64]store.JobVersion // what the watch's first look recorded
		now       jobsAt
		want      []int64
	}{
		{"every change: unchanged", false, []int64{1}, map[int64]store.JobVersion{1: pending}, jobsAt{1: pending}, nil},
		{"every change: started", false, []int64{1}, map[int64]store.JobVersion{1: pending}, jobsAt{1: running}, []int64{1}},
		{"every change: unseen, final", false, []int64{1, 2}, nil, jobsAt{1: done, 2: running}, []int64{1}},
		{"every change: gone", false, []int64{1}, map[int64]store.JobVersion{1: pending}, jobsAt{}, []int64{1}},
		{"end alone: started", true, []int64{1, 2}, nil, jobsAt{1: running, 2: pending}, nil},
		{"end alone: final", true, []int64{1, 2}, nil, jobsAt{1: running, 2: done}, []int64{2}},
		{"end alone: final beside one gone", true, []int64{1, 2, 3}, nil, jobsAt{2: done, 3: pending}, []int64{1, 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := &watchHub{ctx: context.Background, read: c.now, log: func(string, ...any) {},
				byJob: make(map[int64][]*JobWatch), seen: make(map[int64]store.JobVersion)}
			w := h.add(c.watched, WatchOptions{FinalOnly: c.finalOnly})
			for id, v := range c.saw {
				w.Saw(id, v)
			}
			h.backstop()
			read, known := w.Changed()
			if len(known) != 0 || !slices.Equal(read, c.want) {
				t.Fatalf("told %v (and %d known), want %v", read, len(known), c.want)
			}
		})
	}
}

// A start wakes only watches of every change, and once the last of them ended a start takes
// no lock: running counts their jobs down as they Stop or Close.
func TestStartsWakeOnlyWatchesOfEveryChange(t *testing.T) {
	h := &watchHub{ctx: context.Background, read: jobsAt{}, log: func(string, ...any) {},
		byJob: make(map[int64][]*JobWatch), seen: make(map[int64]store.JobVersion)}
	ends := h.add([]int64{1, 2, 3}, WatchOptions{FinalOnly: true})
	every := h.add([]int64{2, 3}, WatchOptions{})
	h.changed(changeRunning, 1, 2, 3)
	if read, _ := ends.Changed(); len(read) != 0 {
		t.Fatalf("a watch of the end alone was told of starts of %v", read)
	}
	if read, _ := every.Changed(); !slices.Equal(read, []int64{2, 3}) {
		t.Fatalf("a watch of every change was told of starts of %v, want [2 3]", read)
	}
	every.Stop(2)
	if n := h.running.Load(); n != 1 {
		t.Fatalf("running is %d after one of two jobs stopped, want 1", n)
	}
	every.Close()
	ends.Close()
	if n := h.running.Load(); n != 0 {
		t.Fatalf("running is %d after every watch closed, want 0", n)
	}
}

// A watch set to wake at n jobs is not signalled by the changes before the nth (a watcher
// gathering changes is not woken by each), is by the nth, and is told at once when n jobs
// already wait; set back to 1, every change signals again.
func TestWatchWakesOnlyAtItsCount(t *testing.T) {
	h := &watchHub{ctx: context.Background, read: jobsAt{}, log: func(string, ...any) {},
		byJob: make(map[int64][]*JobWatch), seen: make(map[int64]store.JobVersion)}
	w := h.add([]int64{1, 2, 3, 4}, WatchOptions{FinalOnly: true})
	signalled := func() bool {
		select {
		case <-w.C():
			return true
		default:
			return false
		}
	}
	if w.WakeAt(3) {
		t.Fatal("WakeAt(3) said 3 jobs were pending before any changed")
	}
	h.changed(changeAny, 1)
	h.finished(2, func() *job.Job { return &job.Job{ID: 2, State: job.StateSucceeded} })
	if signalled() {
		t.Fatal("the watch was signalled by 2 changes while set to wake at 3")
	}
	h.changed(changeAny, 3)
	if !signalled() {
		t.Fatal("the watch was not signalled by its 3rd change")
	}
	if !w.WakeAt(2) {
		t.Fatal("WakeAt(2) said fewer than 2 were pending with 3 pending")
	}
	w.WakeAt(1)
	if read, known := w.Changed(); !slices.Equal(read, []int64{1, 3}) || len(known) != 1 {
		t.Fatalf("Changed = %v and %d known, want [1 3] and 1", read, len(known))
	}
	h.changed(changeAny, 4)
	if !signalled() {
		t.Fatal("set back to 1, the watch was not signalled by a change")
	}
}

// A job handed to its watches final leaves the hub then: it is no longer counted as watched
// (nor its starts as wanted), and a watch whose every job was handed so has none left to
// remove when it closes.
func TestJobHandedFinalLeavesTheHub(t *testing.T) {
	h := &watchHub{ctx: context.Background, read: jobsAt{}, log: func(string, ...any) {},
		byJob: make(map[int64][]*JobWatch), seen: make(map[int64]store.JobVersion)}
	ends := h.add([]int64{1, 2}, WatchOptions{FinalOnly: true})
	every := h.add([]int64{2}, WatchOptions{})
	done := func(id int64) func() *job.Job {
		return func() *job.Job { return &job.Job{ID: id, State: job.StateSucceeded} }
	}
	h.finished(2, done(2))
	if n, r := h.watched.Load(), h.running.Load(); n != 1 || r != 0 {
		t.Fatalf("after job 2 was handed over: %d watched, %d wanting starts; want 1 and 0", n, r)
	}
	for _, w := range []*JobWatch{ends, every} {
		if _, known := w.Changed(); len(known) != 1 || known[0].ID != 2 {
			t.Fatalf("a watch of job 2 was handed %v, want job 2", known)
		}
	}
	if every.live != 0 {
		t.Fatalf("the watch of job 2 alone holds %d jobs after it was handed over", every.live)
	}
	every.Close()
	h.finished(1, done(1))
	ends.Stop(1, 2) // already gone: nothing moves
	if n, r, l := h.watched.Load(), h.running.Load(), ends.live; n != 0 || r != 0 || l != 0 {
		t.Fatalf("after every job was handed over: %d watched, %d wanting starts, %d held; want 0", n, r, l)
	}
	ends.Close()
	if len(h.byJob) != 0 {
		t.Fatalf("the hub still holds %d jobs", len(h.byJob))
	}
}
