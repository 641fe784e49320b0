package security

import (
	"context"
	"errors"
	"io"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// fuzzFrames splits data into frames: a length byte, then that many bytes.
func fuzzFrames(data []byte) [][]byte {
	var out [][]byte
	for len(data) > 0 {
		n := int(data[0])
		data = data[1:]
		n = min(n, len(data))
		out = append(out, data[:n])
		data = data[n:]
	}
	return out
}

func frame(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	if len(b) > 255 {
		panic("seed frame too long")
	}
	return append([]byte{byte(len(b))}, b...)
}

// FuzzWorkerStream sends a valid Hello and then arbitrary bytes, frame by frame, as worker
// messages on a real broker's stream (bytes as they are: invalid protos and invalid UTF-8
// reach the broker). Whatever they hold, the stream ends with OK or a client error, never
// INTERNAL or UNKNOWN, and the broker keeps serving.
func FuzzWorkerStream(f *testing.F) {
	tok := "1.00000000000000000000000000000000"
	req := func(m *jobwirev1.ConnectRequest) []byte { return frame(m) }
	f.Add(req(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Heartbeat{Heartbeat: &jobwirev1.Heartbeat{
		Leases: []*jobwirev1.LeaseRef{{JobId: 1, LeaseToken: tok}}}}}))
	f.Add(append(req(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Started{Started: &jobwirev1.Started{JobId: 1, LeaseToken: tok}}}),
		req(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Result{Result: &jobwirev1.Result{JobId: 1, LeaseToken: tok,
			Outcome: &jobwirev1.Result_Failure{Failure: &jobwirev1.Failure{ErrorType: "E", Message: "m"}}}}})...))
	f.Add(req(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Release{Release: &jobwirev1.Release{JobId: 1, LeaseToken: "x"}}}))
	f.Add(req(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Drain{Drain: &jobwirev1.Drain{}}}))
	f.Add(req(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Hello{Hello: brokertest.Hello("again", 1, "t")}}))
	batch := func(msgs ...*jobwirev1.ConnectRequest) *jobwirev1.ConnectRequest {
		return &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Batch{Batch: &jobwirev1.ConnectRequestBatch{Messages: msgs}}}
	}
	started := &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Started{Started: &jobwirev1.Started{JobId: 1, LeaseToken: tok}}}
	f.Add(req(batch(started, &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Result{Result: &jobwirev1.Result{JobId: 1, LeaseToken: tok,
		Outcome: &jobwirev1.Result_Success{Success: &jobwirev1.Success{}}}}})))
	f.Add(req(batch(started, batch(started))))
	f.Add(req(batch(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Drain{Drain: &jobwirev1.Drain{}}})))
	f.Add(req(batch()))
	f.Add([]byte{3, 0x0a, 0x01, 0xff}) // a hello field holding a truncated message
	f.Add([]byte{})
	b := brokertest.New(f, brokertest.Options{Quiet: true})
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), brokertest.WaitTimeout)
		defer cancel()
		enqueueOne(t, b, &jobwirev1.JobSpec{Type: "t"})
		stream, err := b.Conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true},
			jobwirev1.WorkerService_Connect_FullMethodName, grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		hello, _ := proto.Marshal(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Hello{Hello: brokertest.Hello("fuzz", 2, "t")}})
		frames := append([][]byte{hello}, fuzzFrames(data)...)
		for _, fr := range frames {
			if err := stream.SendMsg(fr); err != nil {
				break // the broker ended the stream; RecvMsg says why
			}
		}
		_ = stream.CloseSend()
		var out []byte
		for {
			err := stream.RecvMsg(&out)
			if err == nil {
				continue
			}
			if errors.Is(err, io.EOF) {
				return
			}
			switch status.Code(err) {
			case codes.InvalidArgument, codes.ResourceExhausted, codes.FailedPrecondition:
				return
			}
			t.Fatalf("the stream ended with %v", err)
		}
	})
}
