package schedule

import "time"

// State is what the store holds of a schedule between decisions.
type State struct {
	// Next is the fire time not yet handled.
	Next time.Time
	// Buffered is an occurrence kept back by OverlapBufferOne (zero: none).
	Buffered time.Time
	// PreviousRunning says the last occurrence's job has not finished.
	PreviousRunning bool
}

// Decision is what a schedule does at a moment.
type Decision struct {
	// Fire are the occurrences to enqueue now, oldest first.
	Fire []time.Time
	// Next is the fire time to store: the first not handled.
	Next time.Time
	// Buffered is the occurrence kept back, to store (zero: none).
	Buffered time.Time
	// CancelPrevious asks that the previous occurrence's job be cancelled first.
	CancelPrevious bool
	// Missed counts occurrences passed over because they were missed (catch-up) and Skipped
	// those dropped by the overlap policy.
	Missed, Skipped int
}

// Decide is what the schedule d with timetable tt does at now, from its stored state s. A
// decision with nothing to fire still moves Next past now.
func Decide(d *Definition, tt *Timetable, s State, now time.Time) Decision {
	due, next, missed := dueAt(d, tt, s.Next, now)
	out := Decision{Next: next, Missed: missed}
	if d.Overlap == OverlapCancelPrevious {
		// Each occurrence cancels the one before it: of those due, only the latest runs.
		if len(due) > 0 {
			out.Fire = due[len(due)-1:]
			out.Skipped = len(due) - 1
			out.CancelPrevious = s.PreviousRunning
		}
		return out
	}
	running := s.PreviousRunning
	if !s.Buffered.IsZero() && !running {
		// The kept occurrence goes first, now that the one before it finished.
		out.Fire = append(out.Fire, s.Buffered)
		running = true
	} else {
		out.Buffered = s.Buffered
	}
	for _, t := range due {
		switch {
		case !running || d.Overlap == OverlapAllowAll:
			out.Fire = append(out.Fire, t)
			running = true
		case d.Overlap == OverlapBufferOne && out.Buffered.IsZero():
			out.Buffered = t
		default:
			out.Skipped++
		}
	}
	return out
}

// dueAt lists the occurrences from next up to now the catch-up mode keeps, the next fire time
// after them, and how many it passed over as missed. One older than LateGrace was missed; only
// those within the catch-up window are caught up.
func dueAt(d *Definition, tt *Timetable, next, now time.Time) (due []time.Time, after time.Time, missed int) {
	if next.After(now) {
		return nil, next, 0
	}
	oldest := now.Add(-d.Window())
	if d.CatchUp == CatchUpSkip {
		oldest = now.Add(-LateGrace)
	}
	for ; !next.IsZero() && next.Before(oldest); next = tt.Next(next) {
		missed++
		if missed == MaxFires {
			// Jump past the rest of what is out of the window rather than walk it (an
			// @every 1s schedule stopped for a month): Missed then counts at least this many.
			next = tt.Next(oldest.Add(-time.Nanosecond))
			break
		}
	}
	t := next
	for ; !t.IsZero() && !t.After(now) && len(due) < MaxFires; t = tt.Next(t) {
		due = append(due, t)
	}
	if len(due) == 0 {
		return nil, t, missed
	}
	if d.CatchUp == CatchUpAll {
		return due, t, missed
	}
	// Skip kept only the occurrences on time (oldest), latest those within the window: of
	// either, the latest runs once.
	return due[len(due)-1:], t, missed + len(due) - 1
}
