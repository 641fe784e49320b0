package broker

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Workers even out across the brokers of a cluster. A worker whose connection spreads over
// several brokers (Hello.Movable) reconnects to whichever is up when its broker goes away, and
// nothing brings it back when that broker returns: after a restart, or a rolling upgrade, the
// workers pile up on the brokers that stayed. So each broker publishes its count of worker
// streams with its heartbeat (store.BrokerRecord.Workers) and, every ClusterPoll, compares it
// with the live brokers' counts: one that holds two or more streams more than the broker with
// the fewest ends one movable stream (ErrMoved), whose worker reconnects, most likely to
// another broker, and keeps its leases there (Open). One stream per poll, so that the counts,
// a poll old at most, catch up between moves and the brokers never trade workers back and
// forth over a difference of one.
//
// A worker that is not movable (its connection reaches one broker) is never moved: its next
// stream would come back here. A movable one may still come back (its channel may not reach
// the broker with the fewest, or not yet, or that broker died a moment ago and still counts as
// live): each such return doubles the wait before the next move, up to maxMoveGap, so a broker
// that no worker can reach costs a move every few minutes, not one a second. The wait starts
// again once the counts are even, once the broker with the fewest has more than at the last
// move (moves land there), and once the other live brokers change (one came back).

// ErrMoved ends a worker stream that the broker moved away to even out the brokers' workers;
// the transport ends the stream with UNAVAILABLE, and the worker reconnects.
var ErrMoved = errors.New("this broker serves more workers than another: reconnect, to another broker")

const (
	// bounceWindow: a moved worker whose next stream comes back within it came back because
	// of the move.
	bounceWindow = 10 * time.Second
	// maxMoveGap caps the wait between moves that keep coming back.
	maxMoveGap = 5 * time.Minute
)

// workerCounter is what a cluster's store offers to publish this broker's count of worker
// streams with its heartbeat, and to tell the other live brokers' counts as that heartbeat read
// them (by broker id; nil before the first).
type workerCounter interface {
	CountWorkers(count func() int)
	PeerWorkers() map[string]int
}

// moves is the state of the broker's moves of workers, with a lock of its own, taken inside the
// broker's lock when both are held.
type moves struct {
	mu   sync.Mutex
	poll time.Duration        // the least wait after a move that came back
	gap  time.Duration        // the wait after a move before the next; zero: none
	next time.Time            // no move before then
	sent map[string]time.Time // worker id → when it was moved, within bounceWindow
	// others names the other live brokers when last looked at: when they change (a broker
	// came back, or died), the wait starts again.
	others string
	// to is the broker with the fewest streams at the last move, and toWorkers its count then:
	// once it has more, moves are landing there, and the wait starts again too.
	to        string
	toWorkers int
}

// publishWorkers makes the cluster's store write this broker's count of worker streams with
// its heartbeat.
func (m *clustered) publishWorkers() {
	b := m.b
	if c, ok := m.cluster.(workerCounter); ok {
		c.CountWorkers(func() int {
			b.mu.Lock()
			defer b.mu.Unlock()
			return len(b.table.sessions)
		})
	}
}

// rebalance moves one movable worker stream away if this broker holds two or more streams more
// than the live broker with the fewest. It runs on every poll, on the counts the last heartbeat
// read, so it costs the database nothing.
func (m *clustered) rebalance() {
	b, mv := m.b, &m.moves
	c, ok := m.cluster.(workerCounter)
	if !ok {
		return
	}
	peers := c.PeerWorkers()
	ids := make([]string, 0, len(peers))
	others := make([]int, 0, len(peers))
	for id := range peers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		others = append(others, peers[id])
	}
	names := strings.Join(ids, " ")
	b.mu.Lock()
	defer b.mu.Unlock()
	mv.mu.Lock()
	defer mv.mu.Unlock()
	now := b.clk.Now()
	for id, at := range mv.sent {
		if now.Sub(at) >= bounceWindow {
			delete(mv.sent, id)
		}
	}
	if n, ok := peers[mv.to]; names != mv.others || (ok && n > mv.toWorkers) {
		mv.others, mv.gap, mv.next = names, 0, time.Time{}
	}
	fewest, uneven := unevenWorkers(len(b.table.sessions), others)
	if !uneven {
		mv.gap = 0
		return
	}
	s := b.movableLocked()
	if s == nil || b.shuttingDown || now.Before(mv.next) {
		return
	}
	mv.next = now.Add(mv.gap)
	if mv.sent == nil {
		mv.sent = make(map[string]time.Time)
	}
	mv.sent[s.workerID] = now
	for _, id := range ids {
		if peers[id] == fewest {
			mv.to, mv.toWorkers = id, fewest
			break
		}
	}
	b.log.Info("moved a worker to another broker to even out the workers", "worker", s.workerID, "session", s.id,
		"workers", len(b.table.sessions), "fewest_elsewhere", fewest)
	s.draining = true
	s.out.closeWith(fmt.Errorf("%w (%d worker streams here, %d on another live broker)", ErrMoved, len(b.table.sessions), fewest))
}

// unevenWorkers reports whether a broker holding mine worker streams should move one away, given
// the counts of the other live brokers, and the fewest of those.
func unevenWorkers(mine int, others []int) (fewest int, uneven bool) {
	if len(others) == 0 {
		return 0, false
	}
	fewest = others[0]
	for _, n := range others[1:] {
		fewest = min(fewest, n)
	}
	return fewest, mine-fewest >= 2
}

// movableLocked picks the stream to move: a movable one taking work, with the fewest leases
// (the least for another broker to adopt), the newest of those; nil if none.
func (b *Broker) movableLocked() *Session {
	var pick *Session
	for _, s := range b.table.sessions {
		if !s.movable || s.draining || s.closed {
			continue
		}
		if pick == nil || len(s.held) < len(pick.held) || (len(s.held) == len(pick.held) && !s.since.Before(pick.since)) {
			pick = s
		}
	}
	return pick
}

// returnedLocked notes, with b.mu held, a worker's new stream (see moves.returned).
func (b *Broker) returnedLocked(workerID string, now time.Time) { b.mode.returned(workerID, now) }

// returned notes a worker's new stream: one moved away within bounceWindow came back, so the
// next move waits twice as long as the last (at least a poll, at most maxMoveGap).
func (mv *moves) returned(workerID string, now time.Time) {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	at, ok := mv.sent[workerID]
	if !ok {
		return
	}
	delete(mv.sent, workerID)
	if now.Sub(at) >= bounceWindow {
		return
	}
	mv.gap = min(max(2*mv.gap, mv.poll), maxMoveGap)
	mv.next = now.Add(mv.gap)
}

// gapNow is the wait after a move before the next (tests).
func (mv *moves) gapNow() time.Duration {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	return mv.gap
}
