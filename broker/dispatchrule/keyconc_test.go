package dispatchrule_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/jobwire/jobwire/broker/dispatchrule"
)

func TestKeyReason(t *testing.T) {
	for _, tc := range []struct {
		key  string
		k    dispatchrule.Key
		want dispatchrule.Reason
	}{
		{"", dispatchrule.Key{}, dispatchrule.None},
		{"a", dispatchrule.Key{Limit: 1, Held: 0}, dispatchrule.None},
		{"a", dispatchrule.Key{Limit: 1, Held: 1}, dispatchrule.KeyAtLimit},
		{"a", dispatchrule.Key{Limit: 2, Held: 3}, dispatchrule.KeyAtLimit},
	} {
		if got := dispatchrule.KeyReason(dispatchrule.Job{Key: tc.key}, tc.k); got != tc.want {
			t.Errorf("KeyReason(%q, %+v) = %s, want %s", tc.key, tc.k, got, tc.want)
		}
	}
	// The key's rule comes after the queue's and before the breaker's.
	st := dispatchrule.State{Queue: dispatchrule.Queue{Cap: 1, Held: 1}, Key: dispatchrule.Key{Limit: 1, Held: 1},
		Breaker: dispatchrule.Breaker{State: dispatchrule.Open}}
	if got := dispatchrule.Check(dispatchrule.Job{Key: "a"}, st); got != dispatchrule.QueueAtCap {
		t.Errorf("Check = %s, want queue_at_cap first", got)
	}
	st.Queue = dispatchrule.Queue{}
	if got := dispatchrule.Check(dispatchrule.Job{Key: "a"}, st); got != dispatchrule.KeyAtLimit {
		t.Errorf("Check = %s, want key_at_limit before breaker_open", got)
	}
}

// keysOf names the keys of jobs in order.
func keysOf(jobs []dispatchrule.Keyed, order []int) []string {
	out := make([]string, len(order))
	for i, k := range order {
		out[i] = jobs[k].Key
		if out[i] == "" {
			out[i] = fmt.Sprint("-", jobs[k].Seq)
		}
	}
	return out
}

func TestFairOrder(t *testing.T) {
	var jobs []dispatchrule.Keyed
	add := func(key string, prio, held int, served int64) {
		jobs = append(jobs, dispatchrule.Keyed{Key: key, Priority: prio, Seq: len(jobs), Held: held, Served: served})
	}
	for range 4 {
		add("big", 0, 0, 0)
	}
	add("a", 0, 0, 0)
	add("", 0, 0, 0)
	add("a", 0, 0, 0)
	add("b", 5, 0, 0) // a higher priority goes first whatever its turn
	order, _ := dispatchrule.FairOrder(jobs)
	want := []string{"b", "big", "a", "-5", "big", "a", "big", "big"}
	if got := keysOf(jobs, order); !slices.Equal(got, want) {
		t.Fatalf("FairOrder = %v, want %v", got, want)
	}

	// A key with jobs running waits its turn behind keys with fewer; among equals, the key
	// served longest ago goes first.
	jobs = nil
	add("busy", 0, 2, 10)
	add("recent", 0, 0, 20)
	add("idle", 0, 0, 5)
	order, _ = dispatchrule.FairOrder(jobs)
	if got, want := keysOf(jobs, order), []string{"idle", "recent", "busy"}; !slices.Equal(got, want) {
		t.Fatalf("FairOrder = %v, want %v", got, want)
	}
}

func ExampleFairOrder() {
	jobs := []dispatchrule.Keyed{
		{Key: "acme", Seq: 0}, {Key: "acme", Seq: 1}, {Key: "acme", Seq: 2}, {Key: "globex", Seq: 3},
	}
	order, turns := dispatchrule.FairOrder(jobs)
	for _, i := range order {
		fmt.Println(jobs[i].Key, turns[i])
	}
	// Output:
	// acme 1
	// globex 1
	// acme 2
	// acme 3
}
