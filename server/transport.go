package server

import (
	"net"
	"runtime"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Transport bounds what connections may cost the broker (docs/security.md, "Limits"). grpc-go's
// defaults allow any number of streams per connection and never close an idle connection, so a
// client could hold memory with thousands of streams or sockets it never uses.
type Transport struct {
	// MaxConnections caps the open connections; past it, new ones wait to be accepted.
	MaxConnections int
	// MaxConcurrentStreams caps the calls running at once on one connection.
	MaxConcurrentStreams uint32
	// MaxRecvMsgSize is the largest message the broker reads, in bytes.
	MaxRecvMsgSize int
	// ConnectionTimeout bounds a new connection's handshake.
	ConnectionTimeout time.Duration
	// MinPingInterval is the shortest interval between client pings; a client pinging more
	// often is disconnected (too_many_pings). Pings without an open call are allowed.
	MinPingInterval time.Duration
	// PingAfter and PingTimeout: the broker pings a connection silent for PingAfter and
	// closes it if no answer comes within PingTimeout.
	PingAfter, PingTimeout time.Duration
	// MaxConnectionIdle closes a connection with no call open for that long.
	MaxConnectionIdle time.Duration
	// MaxConnectionAge closes every connection after that long (after MaxConnectionAgeGrace
	// for its calls to end), so clients pick up new certificates and spread over brokers.
	// Workers reconnect and adopt their leases.
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
	// StreamWindow and ConnWindow are the flow-control windows, in bytes, of each call and of
	// each connection: how much a client may send that the broker has not yet read. Fixed
	// (64 KiB or more), they also turn off grpc-go's probing of the bandwidth-delay product,
	// which pings the client for each burst of data it reads: for a stream of small messages,
	// one job at a time, an extra frame and wake-up each way per message. Zero keeps grpc-go's
	// probing windows, which grow up to 16 MiB a connection.
	StreamWindow, ConnWindow int32
	// StreamWorkers is how many goroutines grpc-go keeps to run calls (grpc.NumStreamWorkers,
	// an experimental option): a call taken by one of them reuses its grown stack instead of
	// starting a goroutine, and when all are busy (worker streams hold theirs for as long as
	// they are open) the call gets a goroutine of its own, as without them. Zero: a goroutine
	// per call.
	StreamWorkers uint32
}

// DefaultTransport: 1024 connections, 128 calls per connection, 4 MiB messages, a 5 s
// handshake, pings at most every 10 s, idle connections closed after 5 min and every connection
// after 30 min (1 min grace), fixed windows of 1 MiB a call and 4 MiB a connection, and a
// stream worker per CPU the process may use.
func DefaultTransport() Transport {
	return Transport{
		MaxConnections:        1024,
		MaxConcurrentStreams:  128,
		MaxRecvMsgSize:        4 << 20,
		ConnectionTimeout:     5 * time.Second,
		MinPingInterval:       10 * time.Second,
		PingAfter:             time.Minute,
		PingTimeout:           10 * time.Second,
		MaxConnectionIdle:     5 * time.Minute,
		MaxConnectionAge:      30 * time.Minute,
		MaxConnectionAgeGrace: time.Minute,
		StreamWindow:          StreamWindow,
		ConnWindow:            ConnWindow,
		StreamWorkers:         uint32(runtime.GOMAXPROCS(0)),
	}
}

// StreamWindow and ConnWindow are the default flow-control windows of a call and of a
// connection (Transport): large enough that a job's payload (MaxRecvMsgSize at most) never
// waits for more than a few window updates, small enough that 1024 connections cannot make
// the broker hold more than 4 GiB of unread requests.
const (
	StreamWindow = 1 << 20
	ConnWindow   = 4 << 20
)

// ServerOptions are the grpc.ServerOptions that enforce t.
func (t Transport) ServerOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.MaxConcurrentStreams(t.MaxConcurrentStreams),
		grpc.MaxRecvMsgSize(t.MaxRecvMsgSize),
		grpc.ConnectionTimeout(t.ConnectionTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: t.MinPingInterval, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time: t.PingAfter, Timeout: t.PingTimeout,
			MaxConnectionIdle: t.MaxConnectionIdle,
			MaxConnectionAge:  t.MaxConnectionAge, MaxConnectionAgeGrace: t.MaxConnectionAgeGrace,
		}),
	}
	if t.StreamWorkers > 0 {
		opts = append(opts, grpc.NumStreamWorkers(t.StreamWorkers))
	}
	if t.StreamWindow > 0 {
		opts = append(opts, grpc.InitialWindowSize(t.StreamWindow))
	}
	if t.ConnWindow > 0 {
		opts = append(opts, grpc.InitialConnWindowSize(t.ConnWindow))
	}
	return opts
}

// Listener wraps lis so that at most t.MaxConnections connections are open at once.
func (t Transport) Listener(lis net.Listener) net.Listener {
	return netutil.LimitListener(lis, t.MaxConnections)
}
