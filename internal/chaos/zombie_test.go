package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// zombie plays a worker that lost a lease and did not notice: when a job starts under a new
// lease, it reports success under the job's earlier lease, on a stream of its own that names
// that lease in Hello.held, to whichever broker the connection picks. Every such report must
// be refused; one that is acknowledged SUCCEEDED is caught by the checks (the ack is recorded in
// the ledger like the workers' own).
type zombie struct {
	conn grpc.ClientConnInterface
	l    *ledger

	mu      sync.Mutex
	sent    int
	refused int
	errs    int
	// accepted lists the replays a broker answered with a ResultAck: a stale lease's success
	// must never be, whatever the decision (the lease's own result, if it was stored, was a
	// failure, and a success repeated against a failure is refused too).
	accepted []string
}

// replay reports success for jobID under stale, bounded by a few seconds.
func (z *zombie) replay(ctx context.Context, jobID int64, stale string) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	answer, err := z.send(ctx, jobID, stale)
	z.mu.Lock()
	defer z.mu.Unlock()
	z.sent++
	switch {
	case err != nil:
		z.errs++ // a broker that died under it: nothing was decided
	case answer.GetRefused() != nil:
		z.refused++
	case answer.GetResultAck() != nil:
		z.accepted = append(z.accepted, fmt.Sprintf("job %d: a success under stale lease %s was answered %v",
			jobID, stale, answer.GetResultAck().GetDecision()))
	}
}

func (z *zombie) send(ctx context.Context, jobID int64, stale string) (*jobwirev1.ConnectResponse, error) {
	stream, err := jobwirev1.NewWorkerServiceClient(z.conn).Connect(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = stream.CloseSend() }()
	ref := &jobwirev1.LeaseRef{JobId: jobID, LeaseToken: stale}
	hello := &jobwirev1.Hello{WorkerId: "chaos-zombie", JobTypes: jobTypes, Capacity: 1, Held: []*jobwirev1.LeaseRef{ref}}
	if err := stream.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Hello{Hello: hello}}); err != nil {
		return nil, err
	}
	m, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	if m.GetWelcome() == nil {
		return nil, fmt.Errorf("first message is not Welcome: %v", m)
	}
	result := &jobwirev1.Result{JobId: jobID, LeaseToken: stale, Outcome: &jobwirev1.Result_Success{Success: &jobwirev1.Success{}}}
	if err := stream.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Result{Result: result}}); err != nil {
		return nil, err
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		if a := m.GetResultAck(); a != nil && a.GetJobId() == jobID {
			z.l.mu.Lock()
			z.l.acks[jobID] = append(z.l.acks[jobID], ack{token: a.GetLeaseToken(), decision: a.GetDecision()})
			z.l.mu.Unlock()
			return m, nil
		}
		if r := m.GetRefused(); r != nil && r.GetJobId() == jobID {
			if codes.Code(r.GetCode()) == codes.Unavailable {
				return nil, errors.New("refused as busy")
			}
			return m, nil
		}
	}
}

// answered counts the replays a broker decided on, refused or accepted.
func (z *zombie) answered() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.refused + len(z.accepted)
}

func (z *zombie) String() string {
	z.mu.Lock()
	defer z.mu.Unlock()
	return fmt.Sprintf("%d successes under stale leases replayed: %d refused, %d accepted, %d cut off with a broker",
		z.sent, z.refused, len(z.accepted), z.errs)
}
