package server

import (
	"context"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// ListWorkers lists the connected worker streams: what each serves, its capacity and the
// leases it holds.
func (a *admin) ListWorkers(context.Context, *jobwirev1.ListWorkersRequest) (*jobwirev1.ListWorkersResponse, error) {
	ws := a.b.Workers()
	out := &jobwirev1.ListWorkersResponse{Workers: make([]*jobwirev1.WorkerInfo, 0, len(ws))}
	for _, w := range ws {
		out.Workers = append(out.Workers, &jobwirev1.WorkerInfo{
			SessionId:   w.SessionID,
			WorkerId:    w.WorkerID,
			JobTypes:    w.Types,
			Queues:      w.Queues,
			Capacity:    int32(w.Capacity),
			LeasesHeld:  int32(w.Held),
			Running:     int32(w.Running),
			Draining:    w.Draining,
			ConnectedAt: ts(w.ConnectedAt),
		})
	}
	return out, nil
}
