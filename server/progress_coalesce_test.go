package server_test

import (
	"fmt"
	"testing"

	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// Progress reports that come while the writer is busy are coalesced (broker/outcome.go,
// progressQueue): the newest of each lease is kept and a burst is one write, not one per
// report. The writer commits each op alone here, so every progress write is counted; it is
// held inside the first while nine more reports arrive.
func TestProgressBurstIsOneWrite(t *testing.T) {
	t.Parallel()
	f := brokertest.NewFaults(t, brokertest.DefaultFaultRetries)
	oneByOne := broker.OneByOne
	b := brokertest.New(t, brokertest.Options{Faults: f, Commit: &oneByOne})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := w.Assignment()
	ref := brokertest.Ref(a)
	w.Started(a)
	b.WaitState(id, running)

	entered, release := f.Hold("progress")
	defer release()
	w.Send(progressMsg(ref, 0.1, "report 1"))
	<-entered
	const reports = 10
	for i := 2; i <= reports; i++ {
		w.Send(progressMsg(ref, float64(i)/reports, fmt.Sprintf("report %d", i)))
	}
	// A report breaking the rules is refused at once, in order: once the refusal comes, the
	// reports before it are queued.
	w.Send(progressMsg(ref, 2, ""))
	if r := w.Next().GetRefused(); r.GetRefusedMessage() != jobwirev1.RefusedMessage_REFUSED_MESSAGE_PROGRESS {
		t.Fatalf("got %v, want the bad report refused", r)
	}
	release()
	want := fmt.Sprintf("report %d", reports)
	brokertest.WaitFor(t, "the newest report stored", func() bool { return getJob(t, b, id).GetProgress().GetMessage() == want })
	if n := f.Tries("progress"); n > 2 {
		t.Fatalf("%d reports took %d progress writes, want at most 2 (the one held and one for the rest)", reports, n)
	}
}
