package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jobwire/jobwire/breaker"
)

func TestUnevenWorkers(t *testing.T) {
	for _, tc := range []struct {
		mine   int
		others []int
		fewest int
		uneven bool
	}{
		{mine: 5, others: nil, uneven: false}, // alone: nowhere to go
		{mine: 1, others: []int{0}, fewest: 0, uneven: false},
		{mine: 2, others: []int{0}, fewest: 0, uneven: true},
		{mine: 3, others: []int{2}, fewest: 2, uneven: false}, // a difference of one stays
		{mine: 4, others: []int{9, 2}, fewest: 2, uneven: true},
		{mine: 4, others: []int{3, 5}, fewest: 3, uneven: false},
		{mine: 0, others: []int{7}, fewest: 7, uneven: false},
	} {
		fewest, uneven := unevenWorkers(tc.mine, tc.others)
		if fewest != tc.fewest || uneven != tc.uneven {
			t.Errorf("unevenWorkers(%d, %v) = %d, %v; want %d, %v", tc.mine, tc.others, fewest, uneven, tc.fewest, tc.uneven)
		}
	}
}

// openWorker opens a worker stream named id on broker i of c, movable or not.
func openWorker(t *testing.T, c *cluster, i int, id string, movable bool) *Session {
	t.Helper()
	s, _, err := c.brokers[i].Open(context.Background(), Hello{WorkerID: id, Types: []string{payType}, Capacity: 1, Movable: movable})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// movedAway reports whether the broker ended s to move its worker (ErrMoved).
func movedAway(s *Session) bool {
	s.out.mu.Lock()
	defer s.out.mu.Unlock()
	return errors.Is(s.out.ended, ErrMoved)
}

// waitCounts waits until every broker of c lists the others alive with these worker streams,
// as their heartbeats write them.
func waitCounts(t *testing.T, c *cluster, want ...int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, ok := make([]int, len(want)), true
		for i := range c.brokers {
			list, _, err := c.brokers[i].Brokers(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for j, r := range list {
				ok = ok && r.Alive && r.Workers == want[j]
				got[j] = r.Workers
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker streams of the brokers: %v, want %v", got, want)
		}
		time.Sleep(10 * time.Millisecond) // the heartbeats run on the store's own timer
	}
}

// moveOne runs broker i's rebalance until it moves one of the streams ss away, failing if it
// moves more than one, and returns that one.
func moveOne(t *testing.T, c *cluster, i int, ss ...*Session) *Session {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		// A broker whose heartbeat is late looks dead for a moment, and then nothing moves.
		c.brokers[i].mode.(*clustered).rebalance()
		var moved []*Session
		for _, s := range ss {
			if movedAway(s) {
				moved = append(moved, s)
			}
		}
		switch {
		case len(moved) == 1:
			return moved[0]
		case len(moved) > 1:
			t.Fatalf("broker %d moved %d streams at once", i, len(moved))
		case time.Now().After(deadline):
			t.Fatalf("broker %d moved no stream", i)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Workers that pile up on one broker even out: the broker with two streams more than another
// moves one movable stream at a time, never one that is not movable, and stops at a difference
// of one. A moved worker that comes straight back makes the next move wait, twice as long each
// time.
func TestWorkersEvenOutAcrossBrokers(t *testing.T) {
	// Brokers stay listed alive for three election intervals by the database's clock: at 20 ms,
	// a heartbeat late under load made the other broker look gone for a moment, which starts the
	// wait between moves again (as a broker that died or came back should), and a worker moved
	// before the wait was over.
	c := newClusterElecting(t, 2, DefaultConfig(), breaker.CountConfig(), listening, 250*time.Millisecond)
	a := c.brokers[0]
	am := a.mode.(*clustered)
	pinned := openWorker(t, c, 0, "pinned", false)
	var movable []*Session
	for i := range 3 {
		movable = append(movable, openWorker(t, c, 0, fmt.Sprintf("m%d", i), true))
	}
	waitCounts(t, c, 4, 0)

	// 4 against 0: one moves, and its worker reconnects to the other broker.
	s := moveOne(t, c, 0, movable...)
	s.Close()
	openWorker(t, c, 1, s.workerID, true)
	waitCounts(t, c, 3, 1)
	// 3 against 1: one more.
	rest := make([]*Session, 0, 2)
	for _, m := range movable {
		if m != s {
			rest = append(rest, m)
		}
	}
	s = moveOne(t, c, 0, rest...)
	s.Close()
	openWorker(t, c, 1, s.workerID, true)
	waitCounts(t, c, 2, 2)
	// Even: nothing moves, on either broker.
	for range 3 {
		am.rebalance()
		c.brokers[1].mode.(*clustered).rebalance()
	}
	if movedAway(pinned) {
		t.Fatal("the pinned worker was moved")
	}
	for _, m := range rest {
		if m != s && movedAway(m) {
			t.Fatalf("worker %s was moved with the brokers even", m.workerID)
		}
	}

	// Two more pinned streams on the first: 4 against 2. The one movable stream left there
	// moves, and its worker comes straight back.
	openWorker(t, c, 0, "pinned-2", false)
	openWorker(t, c, 0, "pinned-3", false)
	waitCounts(t, c, 4, 2)
	var last *Session
	for _, m := range rest {
		if m != s {
			last = m
		}
	}
	s = moveOne(t, c, 0, last)
	s.Close()
	back := openWorker(t, c, 0, s.workerID, true)
	gap := am.moves.gapNow()
	if gap != am.moves.poll {
		t.Fatalf("after a worker came back, the wait before the next move is %v, want a poll (%v)", gap, am.moves.poll)
	}
	waitCounts(t, c, 4, 2)
	am.rebalance()
	if movedAway(back) {
		t.Fatal("moved again before the wait was over")
	}
	// Once the wait is over it moves again; the worker comes back again, and the wait doubles.
	c.clk.Advance(gap)
	moveOne(t, c, 0, back).Close()
	back = openWorker(t, c, 0, s.workerID, true)
	gap = am.moves.gapNow()
	if gap != 2*am.moves.poll {
		t.Fatalf("after a second return the wait is %v, want %v", gap, 2*am.moves.poll)
	}

	// Two more pinned streams here (6 against 2), and the wait not over. A worker reaching the
	// broker with the fewest shows that moves land there: the wait starts again, and the
	// worker that kept coming back moves at once.
	openWorker(t, c, 0, "pinned-4", false)
	openWorker(t, c, 0, "pinned-5", false)
	waitCounts(t, c, 6, 2)
	am.rebalance()
	if movedAway(back) {
		t.Fatal("moved before the wait was over")
	}
	openWorker(t, c, 1, "elsewhere", true)
	waitCounts(t, c, 6, 3)
	moveOne(t, c, 0, back)
	if movedAway(pinned) {
		t.Fatal("a pinned worker was moved")
	}
}
