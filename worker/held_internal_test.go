package worker

import (
	"slices"
	"testing"
)

// Hello and heartbeats list at most the worker's capacity of leases, which the broker holds
// them to (it refuses a longer list, and a refused Hello ends the worker). The worker can hold
// more: assignments that found it at capacity wait for their Release to go out. Those come
// last and only while there is room; every job it runs or holds a result of is listed.
func TestHeldStaysWithinCapacity(t *testing.T) {
	t.Parallel()
	tasks := map[leaseRef]*task{
		refOf(1, "a"): {state: stateRunning},
		refOf(2, "b"): {state: stateReleasing},
		refOf(3, "c"): {state: stateDone},
		refOf(4, "d"): {state: stateReleasing},
		refOf(5, "e"): {state: stateLeased},
	}
	for ref, task := range tasks {
		task.ref = ref
	}
	for _, c := range []struct {
		capacity int
		want     []int64
	}{
		{3, []int64{1, 3, 5}},
		{4, []int64{1, 3, 5, 2}},
		{8, []int64{1, 3, 5, 2, 4}},
	} {
		w := &Worker{opts: Options{Concurrency: c.capacity}, tasks: tasks}
		var got []int64
		for _, r := range w.heldLocked() {
			got = append(got, r.GetJobId())
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("capacity %d: held %v, want %v", c.capacity, got, c.want)
		}
	}
}
