package breaker

import (
	"slices"
	"time"
)

// WindowBuckets is how many buckets a ratio-mode breaker splits its SamplingWindow into. The
// window slides a bucket at a time: it holds the calls of the current bucket and of the
// WindowBuckets-1 before it, so between (1-1/WindowBuckets)·SamplingWindow and SamplingWindow of
// history. Buckets are aligned on multiples of their width since the Unix epoch, so every broker
// sharing a breaker cuts time the same way.
const WindowBuckets = 10

// SavedBucket is one bucket of a ratio-mode breaker's sliding window: the calls that ended, and
// how many of them were counted failures, from Start for SamplingWindow/WindowBuckets.
type SavedBucket struct {
	Start    time.Time
	Calls    int
	Failures int
}

// Note is a counted failure as an operator sees it: kept for the last few failures and in the
// [Trip] that opened the breaker.
type Note struct {
	Job     int64 `json:",omitempty"`
	Kind    FailureKind
	Message string `json:",omitempty"`
	At      time.Time
}

// NoteLimit is how many of the last counted failures a breaker keeps ([Info.Recent]).
const NoteLimit = 5

// NoteMessageLimit is how many bytes of a failure's message a [Note] keeps.
const NoteMessageLimit = 200

// Trip is why a breaker opened, taken as it opened: what its window held then and the last
// counted failures. An operator's reset or force clears it.
type Trip struct {
	Mode   Mode
	Reason Reason
	At     time.Time
	// Calls and Failures are what the window held (ratio mode), or the counted failures within
	// Window (count mode, where Calls is 0), including the failure that opened it.
	Calls    int
	Failures int
	// Ratio is Failures/Calls in ratio mode, 0 otherwise.
	Ratio float64 `json:",omitempty"`
	// Window is the SamplingWindow (ratio mode) or Window (count mode) the numbers are over.
	Window time.Duration
	// Last are the last counted failures, oldest first.
	Last []Note `json:",omitempty"`
}

// window is a ratio-mode breaker's sliding window of calls, oldest bucket first.
type window struct {
	width   time.Duration
	buckets []SavedBucket
}

func newWindow(sampling time.Duration) window {
	return window{width: max(sampling/WindowBuckets, time.Nanosecond)}
}

// start is the start of the bucket holding t.
func (w *window) start(t time.Time) time.Time { return t.Truncate(w.width) }

// oldest is the start of the oldest bucket still in the window at now.
func (w *window) oldest(now time.Time) time.Time {
	return w.start(now).Add(-(WindowBuckets - 1) * w.width)
}

// trim drops the buckets that left the window at now.
func (w *window) trim(now time.Time) {
	oldest := w.oldest(now)
	w.buckets = slices.DeleteFunc(w.buckets, func(b SavedBucket) bool { return b.Start.Before(oldest) })
}

// add records one call that ended at now.
func (w *window) add(now time.Time, failed bool) {
	w.trim(now)
	st := w.start(now)
	if n := len(w.buckets); n == 0 || !w.buckets[n-1].Start.Equal(st) {
		w.buckets = append(w.buckets, SavedBucket{Start: st})
	}
	b := &w.buckets[len(w.buckets)-1]
	b.Calls++
	if failed {
		b.Failures++
	}
}

// totals are the calls and failures within the window at now.
func (w *window) totals(now time.Time) (calls, failures int) {
	oldest := w.oldest(now)
	for _, b := range w.buckets {
		if !b.Start.Before(oldest) && !b.Start.After(now) {
			calls += b.Calls
			failures += b.Failures
		}
	}
	return calls, failures
}

// load replaces the buckets with stored ones, re-cut to the current width (a changed
// SamplingWindow), oldest first.
func (w *window) load(saved []SavedBucket) {
	w.buckets = nil
	for _, b := range saved {
		if b.Calls <= 0 || b.Failures < 0 || b.Failures > b.Calls {
			continue
		}
		st := w.start(b.Start)
		i, found := slices.BinarySearchFunc(w.buckets, st, func(x SavedBucket, t time.Time) int { return x.Start.Compare(t) })
		if !found {
			w.buckets = slices.Insert(w.buckets, i, SavedBucket{Start: st})
		}
		w.buckets[i].Calls += b.Calls
		w.buckets[i].Failures += b.Failures
	}
}

func (w *window) saved() []SavedBucket { return slices.Clone(w.buckets) }

// trimNote shortens a failure message for a Note, at a rune boundary.
func trimNote(msg string) string {
	if len(msg) <= NoteMessageLimit {
		return msg
	}
	cut := NoteMessageLimit
	for cut > 0 && msg[cut]&0xC0 == 0x80 {
		cut--
	}
	return msg[:cut] + "…"
}

// FailureCount is how many counted failures a stored state holds while CLOSED: those of Failures
// (count mode) and of the Window's buckets (ratio mode).
func (sv Saved) FailureCount() int {
	n := len(sv.Failures)
	for _, b := range sv.Window {
		n += b.Failures
	}
	return n
}
