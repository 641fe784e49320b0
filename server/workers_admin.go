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

// ListBrokers lists the brokers that serve the database, with which one leads and which one
// answered.
func (a *admin) ListBrokers(ctx context.Context, _ *jobwirev1.ListBrokersRequest) (*jobwirev1.ListBrokersResponse, error) {
	list, self, err := a.b.Brokers(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &jobwirev1.ListBrokersResponse{Brokers: make([]*jobwirev1.BrokerEntry, 0, len(list))}
	for _, r := range list {
		out.Brokers = append(out.Brokers, &jobwirev1.BrokerEntry{
			Id:        r.ID,
			Addr:      r.Addr,
			Host:      r.Host,
			Pid:       int32(r.PID),
			StartedAt: ts(r.StartedAt),
			LastSeen:  ts(r.LastSeen),
			Leader:    r.Leader,
			Alive:     r.Alive,
			Answering: r.ID == self,
			Workers:   int32(r.Workers),
		})
	}
	return out, nil
}
