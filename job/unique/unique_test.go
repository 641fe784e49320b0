package unique_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/job/unique"
)

var at = time.Date(2026, 5, 4, 10, 30, 0, 0, time.UTC)

func src(typ, queue, payload string) unique.Source {
	return unique.Source{Type: typ, Queue: queue, Payload: []byte(payload), At: at}
}

// Two jobs have the same key exactly when the options' parts of them agree.
func TestKeyOf(t *testing.T) {
	t.Parallel()
	base := src("report", "default", `{"customer":{"id":7},"month":"may"}`)
	tests := []struct {
		name string
		o    unique.Options
		a, b unique.Source
		same bool
	}{
		{"type and queue alone", unique.Options{}, base, src("report", "default", `{}`), true},
		{"another type", unique.Options{}, base, src("invoice", "default", `{}`), false},
		{"another queue", unique.Options{}, base, src("report", "other", `{}`), false},
		{"another queue, across queues", unique.Options{AcrossQueues: true}, base, src("report", "other", `{}`), true},
		{"a field that agrees", unique.Options{Fields: []string{"payload.customer.id"}}, base,
			src("report", "default", `{"customer":{"id":7},"month":"june"}`), true},
		{"a field that differs", unique.Options{Fields: []string{"payload.customer.id"}}, base,
			src("report", "default", `{"customer":{"id":8}}`), false},
		{"a field absent and a field empty", unique.Options{Fields: []string{"payload.c"}},
			src("report", "default", `{}`), src("report", "default", `{"c":""}`), false},
		{"the same payload", unique.Options{ByPayload: true}, base, base, true},
		{"another payload", unique.Options{ByPayload: true}, base, src("report", "default", `{}`), false},
		{"a metadata value", unique.Options{Fields: []string{"metadata.tenant"}},
			unique.Source{Type: "r", Queue: "q", Metadata: map[string]string{"tenant": "a"}, At: at},
			unique.Source{Type: "r", Queue: "q", Metadata: map[string]string{"tenant": "a", "x": "y"}, At: at}, true},
		{"the producer's key, concatenations apart", unique.Options{Key: "ab"},
			src("report", "default", ""), unique.Source{Type: "repor", Queue: "tdefault", At: at}, false},
		{"within one period", unique.Options{Period: time.Hour}, base,
			unique.Source{Type: "report", Queue: "default", At: at.Add(29 * time.Minute)}, true},
		{"the next period", unique.Options{Period: time.Hour}, base,
			unique.Source{Type: "report", Queue: "default", At: at.Add(30 * time.Minute)}, false},
		{"no period: any time", unique.Options{}, base,
			unique.Source{Type: "report", Queue: "default", At: at.Add(1000 * time.Hour)}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ka, _ := tc.o.KeyOf(tc.a)
			kb, _ := tc.o.KeyOf(tc.b)
			if (ka == kb) != tc.same || len(ka) != 64 {
				t.Fatalf("keys %s and %s: same %v, want %v", ka, kb, ka == kb, tc.same)
			}
		})
	}
}

// The states a key is held in: the waiting and running ones by default, every one with a
// period, LEASED always.
func TestStates(t *testing.T) {
	t.Parallel()
	states := func(o unique.Options) []job.State {
		_, m := o.KeyOf(src("t", "q", ""))
		return m.States()
	}
	if got := states(unique.Options{}); len(got) != 4 || got[0] != job.StateScheduled || got[3] != job.StateRunning {
		t.Errorf("default states %v, want SCHEDULED..RUNNING", got)
	}
	if got := states(unique.Options{Period: time.Minute}); len(got) != 7 {
		t.Errorf("states with a period %v, want all seven", got)
	}
	got := states(unique.Options{States: []job.State{job.StateScheduled, job.StatePending, job.StateRunning, job.StateSucceeded}})
	if len(got) != 5 || got[2] != job.StateLeased || got[4] != job.StateSucceeded {
		t.Errorf("chosen states %v, want LEASED added", got)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		o    unique.Options
		want string
	}{
		{unique.Options{}, ""},
		{unique.Options{Key: strings.Repeat("k", 256)}, "key must be at most 255 characters"},
		{unique.Options{Fields: []string{"queue"}}, `fields[0] is "queue"`},
		{unique.Options{Fields: []string{"payload"}}, "fields[0]: key \"payload\" is not one of"},
		{unique.Options{Fields: make([]string, 17)}, "more than the limit of 16"},
		{unique.Options{Period: time.Millisecond}, "period must be 1s..8784h0m0s"},
		{unique.Options{States: []job.State{job.StatePending, job.StateRunning}}, "lacks SCHEDULED"},
		{unique.Options{States: []job.State{job.StateScheduled, job.StatePending, job.StateRunning, 9}}, "states[3] is not a job state"},
	} {
		err := tc.o.Check()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Check(%+v) = %v, want %q", tc.o, err, tc.want)
		}
	}
}
