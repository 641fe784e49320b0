package worker

import (
	"reflect"
	"testing"
	"time"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/clock"
)

// Progress goes out at most once per interval, the newest report of each interval, and the
// last one when the handler ends, before its result.
func TestProgressIsThrottledAndTheLastIsSent(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var sent []string
	sentCh := make(chan struct{}, 10)
	o := &outcome{clk: clk, send: func(p *jobwirev1.Progress) {
		sent = append(sent, p.GetMessage())
		sentCh <- struct{}{}
	}}
	j := &Job{out: o}
	for _, m := range []string{"a", "b", "c"} {
		if err := j.SetProgressMessage(m); err != nil {
			t.Fatal(err)
		}
	}
	<-sentCh
	o.mu.Lock()
	if len(sent) != 1 || sent[0] != "a" {
		t.Fatalf("sent %v at once, want [a]", sent)
	}
	o.mu.Unlock()
	clk.Advance(ProgressInterval)
	<-sentCh // the timer sends "c", the newest of the interval; "b" is never sent
	_ = j.SetProgressMessage("d")
	_ = j.SetProgressMessage("e")
	o.end()
	<-sentCh
	o.mu.Lock()
	defer o.mu.Unlock()
	if want := []string{"a", "c", "e"}; len(sent) != 3 || sent[0] != want[0] || sent[1] != want[1] || sent[2] != want[2] {
		t.Fatalf("sent %v, want %v", sent, want)
	}
}

// A handler reads its parents' results in the producer's order, each state named in lower case.
func TestParentResultsKeepOrderAndNameStates(t *testing.T) {
	a := &jobwirev1.Assignment{ParentResults: []*jobwirev1.ParentResult{
		{JobId: 7, Type: "fetch", Result: []byte("rows"), State: jobwirev1.JobState_JOB_STATE_SUCCEEDED},
		{JobId: 5, Type: "fetch", State: jobwirev1.JobState_JOB_STATE_DEAD},
		{JobId: 6, Type: "load", State: jobwirev1.JobState_JOB_STATE_CANCELLED},
	}}
	want := []ParentResult{
		{JobID: 7, Type: "fetch", Result: []byte("rows"), State: "succeeded"},
		{JobID: 5, Type: "fetch", State: "dead"},
		{JobID: 6, Type: "load", State: "cancelled"},
	}
	if got := parentResults(a); !reflect.DeepEqual(got, want) {
		t.Fatalf("parent results %+v, want %+v", got, want)
	}
	if got := parentResults(&jobwirev1.Assignment{}); len(got) != 0 {
		t.Fatalf("a job without parents read %+v", got)
	}
}
