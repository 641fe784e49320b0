package server_test

import (
	"bytes"
	"context"
	"testing"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// A watch of jobs that finished with large results gets every result, though together they
// pass what a client reads in one message (gRPC's default of 4 MiB, as the test's connection
// reads): the broker spreads them over responses of about 1 MiB, in either form a watch takes.
// Gathered by count alone, eight results of 900 KiB were one response of 7 MiB, and the
// watch's stream ended with RESOURCE_EXHAUSTED.
func TestWatchSpreadsLargeResultsOverResponses(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	const n = 8
	big := bytes.Repeat([]byte("r"), 900<<10)
	var ids []int64
	for range n {
		ids = append(ids, enqueue(t, b, &jobwirev1.JobSpec{Type: "t"}))
	}
	w := b.Connect(brokertest.Hello("w", 1, "t"))
	for range n {
		a := w.Assignment()
		w.Send(brokertest.SuccessMsg(brokertest.Ref(a), big))
		if ack := w.Next().GetResultAck(); ack == nil || ack.GetDecision() != jobwirev1.Decision_DECISION_SUCCEEDED {
			t.Fatalf("job %d's result: %v", a.GetJob().GetId(), ack)
		}
	}
	for _, columns := range []bool{false, true} {
		// Opened once all are final, the watch reads them in one read.
		ctx, cancel := context.WithTimeout(context.Background(), brokertest.WaitTimeout)
		stream, err := b.Producer.WatchJobs(ctx, &jobwirev1.WatchJobsRequest{Ids: ids, FinalOnly: true, Columns: columns})
		if err != nil {
			t.Fatal(err)
		}
		results, responses := map[int64]int{}, 0
		for len(results) < n {
			res, err := stream.Recv()
			if err != nil {
				t.Fatalf("columns %v: after %d results in %d responses: %v", columns, len(results), responses, err)
			}
			responses++
			for _, j := range res.GetJobs() {
				results[j.GetId()] = len(j.GetResult())
			}
			for _, d := range res.GetEnds().GetDetails() {
				results[res.GetEnds().GetIds()[d.GetIndex()]] = len(d.GetResult())
			}
		}
		cancel()
		for _, id := range ids {
			if results[id] != len(big) {
				t.Errorf("columns %v: job %d's result was %d bytes, want %d", columns, id, results[id], len(big))
			}
		}
		if responses != n {
			t.Errorf("columns %v: %d responses, want %d: one for each result of 900 KiB", columns, responses, n)
		}
	}
}
