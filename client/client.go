package client

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/protocodec"
)

// DefaultAddr is where a broker listens unless configured otherwise.
const DefaultAddr = "127.0.0.1:7070"

// Client talks to one broker. It is safe for concurrent use; share one per process.
type Client struct {
	conn     *grpc.ClientConn // nil when the caller owns the connection (New)
	cc       grpc.ClientConnInterface
	producer jobwirev1.ProducerServiceClient
	admin    jobwirev1.AdminServiceClient
	tracer   trace.Tracer // nil: the global provider's
	streams  *streamPool  // nil: Enqueue makes a call per job (WithEnqueueStreams)
}

// streamWindow and connWindow are the flow-control windows of a call and of a connection, in
// bytes: the broker's defaults (server.DefaultTransport).
const (
	streamWindow = 1 << 20
	connWindow   = 4 << 20
)

// MaxReceiveBytes is the largest message read from the broker: a job with the largest payload
// (64 MiB) and result (16 MiB) a broker may be set to take, with its other fields. gRPC reads
// 4 MiB unless told otherwise, which a broker whose operator raised max_payload_bytes or
// max_result_bytes would pass with one job (GetJob, a worker's Assignment). Dial's connection
// reads this much; the worker package asks it of its stream on any connection.
const MaxReceiveBytes = 96 << 20

// DialOption configures Dial. Only this package can implement it, so the set of options stays
// a documented, closed list.
type DialOption interface {
	applyDial(*dialConfig)
}

type dialConfig struct {
	grpcOpts   []grpc.DialOption
	block      bool
	clientOpts []Option
	err        error // an option that could not be applied (a file that cannot be read)
}

type dialOptionFunc func(*dialConfig)

func (f dialOptionFunc) applyDial(c *dialConfig) { f(c) }

// WithDialOptions passes options to grpc.NewClient after the package's defaults, so they win:
// pass grpc.WithTransportCredentials to talk TLS to a broker that is not on loopback.
func WithDialOptions(opts ...grpc.DialOption) DialOption {
	return dialOptionFunc(func(c *dialConfig) { c.grpcOpts = append(c.grpcOpts, opts...) })
}

// WithBlock makes Dial wait until the connection is ready, or fail when ctx ends. Without it
// Dial returns at once and the first call connects, which is what long-lived programs want
// (the broker may start later); a command-line tool or a start-up check wants to know now.
func WithBlock() DialOption {
	return dialOptionFunc(func(c *dialConfig) { c.block = true })
}

// Dial connects to the broker at addr ("host:port"). The connection is plaintext unless
// WithTLS, WithTLSFiles or WithDialOptions supplies transport credentials: the broker's default
// listener is loopback only. WithToken authenticates to a broker with auth on. ctx bounds the wait when WithBlock is given and is otherwise only checked.
//
// Close the Client when done.
func Dial(ctx context.Context, addr string, opts ...DialOption) (*Client, error) {
	if addr == "" {
		return nil, errors.New("jobwire: dial: empty broker address")
	}
	return dial(ctx, addr, addr, nil, DefaultEnqueueStreams, opts)
}

// dial connects to target, named name in errors, with the package's defaults, then base, then
// what opts ask for; streams is the enqueue streams unless opts say (WithEnqueueStreams).
func dial(ctx context.Context, name, target string, base []grpc.DialOption, streams int, opts []DialOption) (*Client, error) {
	addr := name
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("jobwire: dial %s: %w", addr, err)
	}
	var cfg dialConfig
	for _, o := range opts {
		o.applyDial(&cfg)
	}
	if cfg.err != nil {
		return nil, fmt.Errorf("jobwire: dial %s: %w", addr, cfg.err)
	}
	grpcOpts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		// Fixed flow-control windows, as the broker's (server.Transport): grpc-go's probing of
		// the bandwidth-delay product pings the broker for each burst of data read, which for
		// one small job at a time is an extra frame and wake-up each way per message.
		grpc.WithInitialWindowSize(streamWindow), grpc.WithInitialConnWindowSize(connWindow),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxReceiveBytes)),
		// A plaintext connection that a TLS broker closes is reported as such (see dialTCP).
		grpc.WithContextDialer(dialTCP)}, base...)
	grpcOpts = append(grpcOpts, cfg.grpcOpts...)
	conn, err := grpc.NewClient(target, grpcOpts...)
	if err != nil {
		return nil, fmt.Errorf("jobwire: dial %s: %w", addr, err)
	}
	if cfg.block {
		if err := waitReady(ctx, conn); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("jobwire: dial %s: %w", addr, err)
		}
	}
	c := New(conn, append([]Option{WithEnqueueStreams(streams)}, cfg.clientOpts...)...)
	c.conn = conn
	return c, nil
}

// waitReady drives conn to READY, riding out transient failures until ctx ends.
func waitReady(ctx context.Context, conn *grpc.ClientConn) error {
	conn.Connect()
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.Shutdown:
			return errors.New("connection closed")
		case connectivity.Idle:
			conn.Connect()
		}
		if !conn.WaitForStateChange(ctx, s) {
			return fmt.Errorf("broker not ready (last state %s): %w", s, context.Cause(ctx))
		}
	}
}

// New wraps a connection the caller already has, such as one shared with other services or an
// in-memory connection in tests. Close on the returned Client leaves cc open.
func New(cc grpc.ClientConnInterface, opts ...Option) *Client {
	stubs := protocodec.Conn(cc)
	c := &Client{
		cc:       cc,
		producer: jobwirev1.NewProducerServiceClient(stubs),
		admin:    jobwirev1.NewAdminServiceClient(stubs),
	}
	for _, o := range opts {
		o.applyClient(c)
	}
	return c
}

// Close releases the connection made by Dial, and ends the idle streams of WithEnqueueStreams.
// It leaves the connection of a Client made by New open.
func (c *Client) Close() error {
	if c.streams != nil {
		c.streams.close()
	}
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// Conn returns the underlying connection, for calling the generated jobwire.v1 stubs directly
// when the raw protobuf messages are wanted (for example, to print them as protojson).
func (c *Client) Conn() grpc.ClientConnInterface { return c.cc }
