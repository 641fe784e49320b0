package main

import (
	"context"
	"fmt"
	"testing"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// job get says why a job that is not running waits, and --json carries the reason.
func TestJobGetSaysWhyAJobWaits(t *testing.T) {
	t.Parallel()
	b := e2eBroker(t)
	id := b.Enqueue(&jobwirev1.JobSpec{Type: "mail", Queue: "outbox"})
	out := e2eOK(t, b, "job", "get", fmt.Sprint(id))
	e2eContains(t, "job get", out, `Waiting`, `no worker connected to this broker serves type "mail" on queue "outbox"`)
	if _, err := b.Admin.PauseQueue(context.Background(), &jobwirev1.PauseQueueRequest{Queue: "outbox"}); err != nil {
		t.Fatal(err)
	}
	out = e2eOK(t, b, "job", "get", fmt.Sprint(id))
	e2eContains(t, "job get", out, `queue "outbox" is paused`)
	out = e2eOK(t, b, "job", "get", "--json", fmt.Sprint(id))
	e2eContains(t, "job get --json", out, `"reason": "queue_paused"`)
}
