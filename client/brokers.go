package client

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	_ "google.golang.org/grpc/health" // client-side health checking (healthCheckConfig)
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/jobwire/jobwire/internal/brokerset"
)

// schemes keeps each DialBrokers connection's resolver scheme unique within the process.
var schemes atomic.Int64

// DialBrokers connects to several brokers that serve one PostgreSQL database, as Dial does to
// one, and spreads calls over those that are up (gRPC's round_robin): a call made while a
// broker is down or restarting goes to another, and a broker that comes back is used again. A
// call already under way on a broker that dies fails with ErrUnavailable; retry an enqueue with
// its IdempotencyKey.
//
// A broker that cannot reach its database answers UNAVAILABLE within about a second and reports
// NOT_SERVING on its health service until it reaches it again; meanwhile calls go to the
// others. A call it answered UNAVAILABLE is sent to another broker when that cannot store
// anything twice: the broker said nothing of it was applied, the call only reads or sets a
// state, or it enqueues jobs that all carry an IdempotencyKey.
//
// A worker takes the connection too, worker.New(c.Conn(), ...): its stream goes to a broker
// that is up, and when that broker goes away it reconnects to another and keeps its leases.
// Such a worker says it may be moved (Hello.movable): when a broker comes back, brokers that
// hold more workers than it end some of their streams, and those workers reconnect, evening
// the workers out again.
//
// Enqueue makes a call per job here, unless WithEnqueueStreams says otherwise: each call is
// spread and resent on its own. A stream's enqueues all go to the broker it was opened on and
// are not resent; a broker that stops serving ends its streams, and the next Enqueue opens one
// on another. An Enqueue whose stream that broker refused (opened there before the balancer
// saw it stop serving) is made as a call, and resent as calls are.
//
// WithBlock waits until at least one broker is ready.
func DialBrokers(ctx context.Context, addrs []string, opts ...DialOption) (*Client, error) {
	if len(addrs) == 0 {
		return nil, errors.New("jobwire: dial: no broker addresses")
	}
	var state resolver.State
	for _, a := range addrs {
		if a == "" {
			return nil, errors.New("jobwire: dial: empty broker address")
		}
		state.Addresses = append(state.Addresses, resolver.Address{Addr: a})
	}
	r := manual.NewBuilderWithScheme(brokerset.Scheme(schemes.Add(1)))
	r.InitialState(state)
	base := []grpc.DialOption{
		grpc.WithResolvers(r),
		// A broker that cannot reach its database says NOT_SERVING: round robin leaves it
		// out until it serves again.
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"round_robin": {}}], "healthCheckConfig": {"serviceName": ""}}`),
		grpc.WithChainUnaryInterceptor(resendElsewhere(resendTries * len(addrs))),
		// A broker that restarts is back within seconds: look for it again often rather than
		// after gRPC's default backoff of up to two minutes.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
	return dial(ctx, strings.Join(addrs, ","), brokerset.Target(r.Scheme(), len(addrs)), base, 0, opts)
}
