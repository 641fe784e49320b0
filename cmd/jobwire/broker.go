package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// broker is a connection to the broker for one command. The commands call the generated stubs
// through the client's connection because they print the raw responses (--json is protojson of
// the response); the client package supplies the dialing defaults.
type broker struct {
	addr     string
	timeout  time.Duration
	c        *client.Client
	producer jobwirev1.ProducerServiceClient
	admin    jobwirev1.AdminServiceClient
}

// connect validates the common flags and prepares a connection. grpc connects lazily, so an
// absent broker shows up as UNAVAILABLE on the first call, which then fails at once: calls do
// not wait for the broker to appear (grpc.WaitForReady(false), the default).
func connect(ctx context.Context, cf *commonFlags) (*broker, error) {
	if err := cf.validate(); err != nil {
		return nil, err
	}
	secOpts, err := cf.sec.dialOptions()
	if err != nil {
		return nil, err
	}
	// A command makes a call or two: no enqueue streams to open and end.
	c, err := client.Dial(ctx, cf.addr, append(secOpts, client.WithEnqueueStreams(0),
		client.WithDialOptions(grpc.WithDefaultCallOptions(grpc.WaitForReady(false))))...)
	if err != nil {
		return nil, usageErrorf("cannot use broker address %q: %v", cf.addr, err)
	}
	return &broker{
		addr:     cf.addr,
		timeout:  cf.timeout,
		c:        c,
		producer: jobwirev1.NewProducerServiceClient(c.Conn()),
		admin:    jobwirev1.NewAdminServiceClient(c.Conn()),
	}, nil
}

func (b *broker) close() { _ = b.c.Close() }

// call runs one RPC under the command's timeout and turns its error into a sentence.
func call[Resp any](ctx context.Context, b *broker, rpc func(context.Context) (Resp, error)) (Resp, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	resp, err := rpc(ctx)
	if err != nil {
		return resp, b.explain(ctx, err)
	}
	return resp, nil
}

// request is the whole of most commands once their flags are checked: it connects, sends one
// RPC and prints the answer, as protobuf JSON with --json and otherwise as text writes it.
func request[Resp proto.Message](ctx context.Context, e *env, cf *commonFlags,
	rpc func(context.Context, *broker) (Resp, error), text func(Resp) error) error {
	resp, err := fetch(ctx, cf, rpc)
	if err != nil {
		return err
	}
	return show(e, cf, resp, text)
}

// fetch connects and sends one RPC, for commands that must say something about the answer
// (on stderr) whichever way it is then printed; show prints it.
func fetch[Resp any](ctx context.Context, cf *commonFlags, rpc func(context.Context, *broker) (Resp, error)) (Resp, error) {
	b, err := connect(ctx, cf)
	if err != nil {
		var zero Resp
		return zero, err
	}
	defer b.close()
	return call(ctx, b, func(ctx context.Context) (Resp, error) { return rpc(ctx, b) })
}

// show prints an answer: protobuf JSON with --json, so scripts get every field, otherwise
// what text writes for a person.
func show[Resp proto.Message](e *env, cf *commonFlags, resp Resp, text func(Resp) error) error {
	if cf.json {
		return printJSON(e.stdout, resp)
	}
	return text(resp)
}

// unreachableHint ends the sentence for a broker that cannot be reached.
const unreachableHint = "(is `jobwire serve` running? set --addr or " + envAddr + ")"

// explain words an RPC error for a person: a broker that cannot be reached is named by its
// address; otherwise the broker's own message is shown, with anything in it that could steer
// the terminal made visible.
func (b *broker) explain(ctx context.Context, err error) error {
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.Unavailable:
		if ce := client.Classify(err); ce != nil {
			// A TLS mismatch also leaves the broker unconnected, but reconnecting cannot fix it.
			return fmt.Errorf("cannot connect to the broker at %s: %s; %s", b.addr, ce.Problem, ce.Fix)
		}
		if !b.connected() {
			// The transport's own text ("connection error: desc = ...") says nothing a person
			// can act on; where the broker was looked for does.
			return fmt.Errorf("cannot reach the broker at %s %s", b.addr, unreachableHint)
		}
		return fmt.Errorf("the broker at %s is unavailable: %s", b.addr, display(st.Message()))
	case codes.DeadlineExceeded:
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			if !b.connected() {
				return fmt.Errorf("cannot reach the broker at %s within %s %s", b.addr, b.timeout, unreachableHint)
			}
			return fmt.Errorf("the broker at %s did not answer within %s", b.addr, b.timeout)
		}
	case codes.Canceled:
		return errors.New("interrupted")
	case codes.Unimplemented:
		return fmt.Errorf("the broker at %s does not support this command (%s); it may be older than this jobwire", b.addr, display(st.Message()))
	case codes.InvalidArgument:
		// The broker found the input bad: the same verdict, and exit status, as a bad command line.
		return &usageError{msg: display(st.Message())}
	}
	return &rpcError{code: st.Code(), msg: display(st.Message())}
}

// connected reports whether the connection to the broker is up: an UNAVAILABLE on a live
// connection is the broker's own answer (shutting down, storage busy), not a missing broker.
func (b *broker) connected() bool {
	sc, ok := b.c.Conn().(interface{ GetState() connectivity.State })
	return ok && sc.GetState() == connectivity.Ready
}

// rpcError is the broker's refusal of a request, with its code so that a command can word a
// case it expects (a job already finished, a queue that does not exist) in its own terms.
type rpcError struct {
	code codes.Code
	msg  string
}

func (e *rpcError) Error() string { return e.msg }

// rpcCode is the gRPC code of an error from call, or codes.Unknown.
func rpcCode(err error) codes.Code {
	var re *rpcError
	if errors.As(err, &re) {
		return re.code
	}
	return codes.Unknown
}
