// Package brokerdial connects one gRPC client connection to several brokers that serve one
// database, for the client and worker SDKs (which take any grpc.ClientConnInterface): calls and
// worker streams go to the brokers that are up, so a producer or a worker keeps going while
// one broker is down or restarting.
package brokerdial

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// schemes keeps each connection's resolver scheme unique within the process.
var schemes atomic.Int64

// Dial returns a connection to every broker in addrs ("host:port" each) that spreads calls and
// streams over those that are ready (gRPC's round_robin): a call or stream started while a
// broker is down goes to another, and a broker that comes back is used again. A call already
// on a broker that dies fails; the worker SDK reconnects its stream, and a producer retries.
//
// The connection is plaintext unless opts supply transport credentials; opts come after the
// package's own, so they win.
func Dial(addrs []string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	if len(addrs) == 0 {
		return nil, errors.New("brokerdial: no broker addresses")
	}
	r := manual.NewBuilderWithScheme(fmt.Sprintf("jobwire-brokers-%d", schemes.Add(1)))
	var state resolver.State
	for _, a := range addrs {
		if a == "" {
			return nil, errors.New("brokerdial: empty broker address")
		}
		state.Addresses = append(state.Addresses, resolver.Address{Addr: a})
	}
	r.InitialState(state)
	all := append([]grpc.DialOption{
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"round_robin": {}}]}`),
		// A broker that restarts is back within seconds: look for it again often rather than
		// after gRPC's default backoff of up to two minutes.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}, opts...)
	return grpc.NewClient(r.Scheme()+":///brokers", all...)
}
