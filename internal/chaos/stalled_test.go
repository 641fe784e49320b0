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

// stalled plays a worker that hangs: it takes a job, reports it started, then sends nothing,
// not even heartbeats, while its broker lives. Once the job has started again under another
// lease (the first one expired), it wakes up and reports success under its old lease on the same
// stream, to the broker that granted it. That broker may still remember the lease; the database
// does not, and the report must be refused.
type stalled struct {
	conn grpc.ClientConnInterface
	l    *ledger

	mu       sync.Mutex
	taken    int
	refused  int
	accepted []string
}

// run repeats the act until ctx ends.
func (s *stalled) run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := s.once(ctx); err != nil && ctx.Err() == nil {
			// A broker killed under it, or a job that never came back: try again.
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
		}
	}
}

func (s *stalled) once(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := jobwirev1.NewWorkerServiceClient(s.conn).Connect(ctx)
	if err != nil {
		return err
	}
	hello := &jobwirev1.Hello{WorkerId: "chaos-stalled", JobTypes: jobTypes, Capacity: 1}
	if err := stream.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Hello{Hello: hello}}); err != nil {
		return err
	}
	// Every message goes to msgs; the stream's end closes it.
	msgs := make(chan *jobwirev1.ConnectResponse, 64)
	go func() {
		defer close(msgs)
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	var a *jobwirev1.Assignment
	for a == nil {
		select {
		case m, ok := <-msgs:
			if !ok {
				return errors.New("stream ended before an assignment")
			}
			a = m.GetAssignment()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ref := &jobwirev1.LeaseRef{JobId: a.GetJob().GetId(), LeaseToken: a.GetLeaseToken()}
	started := &jobwirev1.Started{JobId: ref.JobId, LeaseToken: ref.LeaseToken}
	if err := stream.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Started{Started: started}}); err != nil {
		return err
	}
	s.mu.Lock()
	s.taken++
	s.mu.Unlock()

	// Hang until a worker runs the job under a newer lease, reading (and ignoring) what the
	// broker sends meanwhile: its Cancel, and jobs assigned to the freed slot, which expire too.
	for deadline := time.Now().Add(20 * time.Second); !s.l.startedUnderLater(ref.JobId, ref.LeaseToken); {
		if time.Now().After(deadline) {
			return fmt.Errorf("job %d never ran again", ref.JobId)
		}
		select {
		case _, ok := <-msgs:
			if !ok {
				return errors.New("stream ended while stalled")
			}
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	result := &jobwirev1.Result{JobId: ref.JobId, LeaseToken: ref.LeaseToken, Outcome: &jobwirev1.Result_Success{Success: &jobwirev1.Success{}}}
	if err := stream.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Result{Result: result}}); err != nil {
		return err
	}
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				return errors.New("stream ended before the answer")
			}
			if r := m.GetRefused(); r != nil && r.GetJobId() == ref.JobId && r.GetLeaseToken() == ref.LeaseToken &&
				r.GetRefusedMessage() == jobwirev1.RefusedMessage_REFUSED_MESSAGE_RESULT {
				if codes.Code(r.GetCode()) == codes.Unavailable {
					return errors.New("refused as busy")
				}
				s.mu.Lock()
				s.refused++
				s.mu.Unlock()
				return nil
			}
			if got := m.GetResultAck(); got != nil && got.GetJobId() == ref.JobId {
				s.l.mu.Lock()
				s.l.acks[ref.JobId] = append(s.l.acks[ref.JobId], ack{token: got.GetLeaseToken(), decision: got.GetDecision()})
				s.l.mu.Unlock()
				s.mu.Lock()
				s.accepted = append(s.accepted, fmt.Sprintf("job %d: a hung worker's success under expired lease %s was answered %v",
					ref.JobId, ref.LeaseToken, got.GetDecision()))
				s.mu.Unlock()
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *stalled) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("a hung worker took %d jobs and reported %d of them after they ran again elsewhere: %d refused, %d accepted",
		s.taken, s.refused+len(s.accepted), s.refused, len(s.accepted))
}
