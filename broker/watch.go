package broker

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobwire/jobwire/internal/service"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// Watching jobs. A producer waiting for a job, or following its progress, holds a JobWatch:
// the broker tells it which of its jobs changed, and it reads only those. Changes are told
// from the broker's own writes as they commit (results, starts, progress, cancels), and from
// its store for the dependents a commit's settling cancelled or a requeue revived, which no
// write names (watchDependents), so a watch costs nothing per job while nothing happens, and a
// broker with no watch pays one atomic load per change. What another broker of a cluster
// writes is told by its events (watchcluster.go); any change no one tells of is found by the
// backstop: every WatchPoll, one read of every watched job (store.VersionReader), however
// many watches there are: of its version, or only of whether it is final when every watch of
// it waits for its end (a row for them all, not one a job).

// watchHub is the broker's watches, by job, and the backstop that reads them again.
type watchHub struct {
	*service.Periodic
	ctx  func() context.Context
	read store.VersionReader
	log  func(msg string, args ...any)

	watched atomic.Int64 // how many jobs are watched: no lock taken while it is zero
	// running is how many watches of a job want its starts and progress (not FinalOnly): no
	// lock taken for a start while it is zero.
	running atomic.Int64

	mu     sync.Mutex
	handed int64 // how many final states the broker's writes handed to watches (finished)
	byJob  map[int64][]*JobWatch
	// remote are the jobs other brokers watch, until when (watchcluster.go).
	remote map[int64]time.Time
	// seen is the version of each watched job the backstop read last.
	seen map[int64]store.JobVersion
}

func newWatchHub(b *Broker) *watchHub {
	h := &watchHub{ctx: func() context.Context { return b.ctx }, read: b.st, log: b.log.Debug,
		byJob: make(map[int64][]*JobWatch), seen: make(map[int64]store.JobVersion), remote: make(map[int64]time.Time)}
	h.startWatchEvents(b)
	poll := b.cfg.WatchPoll
	if poll <= 0 {
		poll = DefaultConfig().WatchPoll
	}
	h.Periodic = service.NewPeriodic(b.clk, poll, h.backstop)
	return h
}

// JobWatch is a watch of some jobs: C is signalled when any of them may have changed, and
// Changed says which.
type JobWatch struct {
	hub       *watchHub
	ids       []int64
	finalOnly bool
	signal    chan struct{}
	mu        sync.Mutex
	// wakeAt is how many jobs must be pending before a change signals C (WakeAt; 1: every
	// change does).
	wakeAt int
	// live is how many of ids the hub still holds for this watch, under the hub's lock: a job
	// handed over final leaves the hub at once (finished), so a watch whose every job ended
	// that way has nothing left to remove when it closes.
	live int
	// changed holds the jobs that may have changed since Changed was last called: each with
	// the snapshot the broker's own final write handed over, or nil when it must be read.
	changed map[int64]*job.Job
}

// WatchOptions adjust a watch.
type WatchOptions struct {
	// FinalOnly: the watcher wants the jobs once final, not their starts or progress. A start
	// or a progress report then does not wake it: a job running longer than the watcher takes
	// to read it is read once as it ends, not also as it starts.
	FinalOnly bool
}

// WatchJobs starts a watch of ids, which the caller must Close. The jobs are not read: the
// caller reads them once after this returns, so that no change between the read and the watch
// is missed.
func (b *Broker) WatchJobs(ids []int64, opts WatchOptions) *JobWatch {
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	w := b.svc.watches.add(ids, opts)
	b.svc.watches.announce(b, ids)
	return w
}

func (h *watchHub) add(ids []int64, opts WatchOptions) *JobWatch {
	w := &JobWatch{hub: h, ids: ids, finalOnly: opts.FinalOnly, signal: make(chan struct{}, 1), wakeAt: 1, live: len(ids),
		changed: make(map[int64]*job.Job)}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		if len(h.byJob[id]) == 0 {
			h.watched.Add(1)
		}
		h.byJob[id] = append(h.byJob[id], w)
	}
	if !opts.FinalOnly {
		h.running.Add(int64(len(ids)))
	}
	return w
}

// C is signalled when one of the watched jobs may have changed since Changed was last called.
func (w *JobWatch) C() <-chan struct{} { return w.signal }

// Changed returns the watched jobs that may have changed since it was last called: those to
// read, in id order, and those whose final state the broker's own write told (known, as
// JobOutcomes would read them, fields a watch leaves out aside), which need no read. A known
// job is shared with other watches: it is not to be modified.
func (w *JobWatch) Changed() (read []int64, known []*job.Job) {
	w.mu.Lock()
	defer w.mu.Unlock()
	read = make([]int64, 0, len(w.changed))
	for id, j := range w.changed {
		if j != nil {
			known = append(known, j)
		} else {
			read = append(read, id)
		}
	}
	clear(w.changed)
	slices.Sort(read)
	return read, known
}

// Pending is how many watched jobs may have changed since Changed was last called.
func (w *JobWatch) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.changed)
}

// WakeAt has a change signal C only once n jobs (at least 1) may have changed since Changed was
// last called, not at every change, until it is called again, and reports whether n already
// may have. A watcher gathering a moment's changes into one read sets it to the jobs it still
// follows: as thousands of jobs a second end, it is then woken once, not each time a job ends
// (the broker's writer pays for every wake of a parked watcher, and the watcher for every look).
func (w *JobWatch) WakeAt(n int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wakeAt = max(n, 1)
	return len(w.changed) >= w.wakeAt
}

// Stop ends the watch of ids (a job the caller has seen final needs watching no longer). A job
// Changed returned as known has left the watch already.
func (w *JobWatch) Stop(ids ...int64) { w.hub.remove(w, ids) }

// Close ends the watch.
func (w *JobWatch) Close() { w.hub.remove(w, w.ids) }

// mark notes that job id may have changed, to snap (nil: to be read). A job marked twice
// before Changed is read: of two changes told, only a read says which came last.
func (w *JobWatch) mark(id int64, snap *job.Job) {
	w.mu.Lock()
	if _, twice := w.changed[id]; twice {
		snap = nil
	}
	w.changed[id] = snap
	wake := len(w.changed) >= w.wakeAt
	w.mu.Unlock()
	if wake {
		select {
		case w.signal <- struct{}{}:
		default:
		}
	}
}

// remove ends w's watch of ids. A wait stops its jobs by the hundred as they end, under the lock
// the broker's writer takes to hand them over (finished): one lookup a job, and the counters
// moved once for all.
func (h *watchHub) remove(w *JobWatch, ids []int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var unwatched, stopped int64
	for _, id := range ids {
		if w.live == 0 {
			break
		}
		ws, ok := h.byJob[id]
		if !ok {
			continue
		}
		was := len(ws)
		if ws = slices.DeleteFunc(ws, func(x *JobWatch) bool { return x == w }); len(ws) == was {
			continue
		}
		stopped++
		w.live--
		if len(ws) > 0 {
			h.byJob[id] = ws
			continue
		}
		delete(h.byJob, id)
		delete(h.seen, id)
		unwatched++
	}
	if !w.finalOnly {
		h.running.Add(-stopped)
	}
	h.watched.Add(-unwatched)
}

// jobChange is what a write did to jobs, as far as their watches care.
type jobChange int

const (
	// changeAny: the jobs may be in any state now, final included.
	changeAny jobChange = iota
	// changeRunning: the jobs started or reported progress; none became final by it, so a
	// FinalOnly watch is not woken.
	changeRunning
)

// changed tells the watches of ids that their jobs may have changed by c.
func (h *watchHub) changed(c jobChange, ids ...int64) {
	if h.watched.Load() == 0 || len(ids) == 0 || (c == changeRunning && h.running.Load() == 0) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		for _, w := range h.byJob[id] {
			if c == changeRunning && w.finalOnly {
				continue
			}
			w.mark(id, nil)
		}
	}
}

// finished hands the watches of job id, if any, its final state as the broker's own write just
// stored it: snapshot builds it, only when someone watches the job. The watchers send it
// without reading the job again, and follow it no more: a final job is sent once, by every
// kind of watch. So the job leaves the hub here, while its entry is at hand, rather than when
// each watcher stops it (the watcher's JobWatch.Stop names only the jobs it read). A change
// after this one (a requeue of a dead job) is then not told to these watches: they send the end
// they were handed, as they would had they read it before the change.
func (h *watchHub) finished(id int64, snapshot func() *job.Job) {
	if h.watched.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ws := h.byJob[id]
	if len(ws) == 0 {
		return
	}
	snap := snapshot()
	h.handed++
	for _, w := range ws {
		w.mark(id, snap)
		w.live--
		if !w.finalOnly {
			h.running.Add(-1)
		}
	}
	delete(h.byJob, id)
	delete(h.seen, id)
	h.watched.Add(-1)
}

// jobsChanged tells the watches of ids, if any, that their jobs may have changed by c.
func (b *Broker) jobsChanged(c jobChange, ids ...int64) { b.svc.watches.changed(c, ids...) }

// backstop reads the watched jobs again and tells the watches of those that changed since it
// last read them: what another broker wrote, or a change no write here told of. A job watched
// for its end alone (every watch of it FinalOnly) is only looked for final, in one row for
// them all (store.VersionReader.FinalAmong); the others' versions are read and compared.
func (h *watchHub) backstop() {
	if h.watched.Load() == 0 {
		return
	}
	h.mu.Lock()
	var every, ends []int64
	for id, ws := range h.byJob {
		if slices.ContainsFunc(ws, func(w *JobWatch) bool { return !w.finalOnly }) {
			every = append(every, id)
		} else {
			ends = append(ends, id)
		}
	}
	h.mu.Unlock()
	h.changed(changeAny, append(h.versionsMoved(every), h.ended(ends)...)...)
}

// ended is the jobs of ids, watched for their end alone, that are final or gone: what their
// watches are to read.
func (h *watchHub) ended(ids []int64) []int64 {
	if len(ids) == 0 {
		return nil
	}
	found, final, err := h.read.FinalAmong(h.ctx(), ids)
	if err != nil {
		h.log("watch backstop: could not read the watched jobs", "jobs", len(ids), "err", err)
		return nil
	}
	if found < len(ids) {
		return h.versionsMoved(ids) // which are gone, and which final
	}
	return final
}

// versionsMoved reads the versions of ids and returns those of the jobs still watched that
// changed since the backstop last read them, are gone, or are final when first read.
func (h *watchHub) versionsMoved(ids []int64) []int64 {
	if len(ids) == 0 {
		return nil
	}
	versions, err := h.read.JobVersions(h.ctx(), ids)
	if err != nil {
		h.log("watch backstop: could not read the watched jobs", "jobs", len(ids), "err", err)
		return nil
	}
	var moved []int64
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		v, ok := versions[id]
		was, known := h.seen[id]
		if _, still := h.byJob[id]; !still {
			continue
		}
		if ok {
			h.seen[id] = v
		}
		// A job first seen here is told when final: a wait's first look records no version of
		// a job not final yet (FinalAmong), so its change since that look shows only so.
		if (known && v != was) || (!known && v.State.Final()) || !ok {
			moved = append(moved, id)
		}
	}
	return moved
}

// Saw records the version of a watched job as its watcher read it: the backstop tells of any
// change from there, a change between the watcher's read and the backstop's first included.
func (w *JobWatch) Saw(id int64, v JobVersion) {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, known := h.seen[id]; !known && h.byJob[id] != nil {
		h.seen[id] = v
	}
}

// JobVersions reads the versions of jobs (store.VersionReader), for a watcher's first look.
func (b *Broker) JobVersions(ctx context.Context, ids []int64) (map[int64]JobVersion, error) {
	return b.st.JobVersions(ctx, ids)
}

// FinalAmong counts the jobs of ids that exist and reads which are final (store.VersionReader),
// for the first look of a watcher that wants only final jobs: it records no version with Saw,
// and the backstop tells it of a job it first reads final.
func (b *Broker) FinalAmong(ctx context.Context, ids []int64) (found int, final []int64, err error) {
	return b.st.FinalAmong(ctx, ids)
}

// FinalsHanded is how many final states the broker's own writes handed to watches, which sent
// them without reading the job.
func (b *Broker) FinalsHanded() int64 {
	h := b.svc.watches
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.handed
}

// Watched is how many jobs are being watched.
func (b *Broker) Watched() int { return int(b.svc.watches.watched.Load()) }

// JobOutcomes reads jobs with their results and progress (store.VersionReader), for watchers.
func (b *Broker) JobOutcomes(ctx context.Context, ids []int64) ([]*job.Job, error) {
	return b.st.JobOutcomes(ctx, ids)
}

// JobVersion is what a watcher compares to tell that a job changed (store.JobVersion).
type JobVersion = store.JobVersion

// VersionOf is j's version.
func VersionOf(j *job.Job) JobVersion { return store.VersionOf(j) }
