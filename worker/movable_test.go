package worker

import (
	"context"
	"testing"

	"google.golang.org/grpc"

	"github.com/jobwire/jobwire/client"
)

// A worker says in Hello that a broker may move it to another (Hello.movable) only when its
// connection spreads over several brokers (client.DialBrokers with more than one address) or
// Options.Movable says its one address does: a worker connected to one broker would come
// straight back.
func TestHelloSaysWhetherTheWorkerMayMove(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dial    func(addr string) (grpc.ClientConnInterface, func() error, error)
		opts    Options
		movable bool
	}{
		{"client.Dial", func(addr string) (grpc.ClientConnInterface, func() error, error) {
			c, err := client.Dial(context.Background(), addr)
			if err != nil {
				return nil, nil, err
			}
			return c.Conn(), c.Close, nil
		}, Options{}, false},
		{"client.Dial, Options.Movable", func(addr string) (grpc.ClientConnInterface, func() error, error) {
			// One address that reaches several brokers, a load balancer's say.
			c, err := client.Dial(context.Background(), addr)
			if err != nil {
				return nil, nil, err
			}
			return c.Conn(), c.Close, nil
		}, Options{Movable: true}, true},
		{"client.DialBrokers, one address", func(addr string) (grpc.ClientConnInterface, func() error, error) {
			c, err := client.DialBrokers(context.Background(), []string{addr})
			if err != nil {
				return nil, nil, err
			}
			return c.Conn(), c.Close, nil
		}, Options{}, false},
		{"client.DialBrokers", func(addr string) (grpc.ClientConnInterface, func() error, error) {
			// The second address is never reached while the first answers.
			c, err := client.DialBrokers(context.Background(), []string{addr, addr})
			if err != nil {
				return nil, nil, err
			}
			return c.Conn(), c.Close, nil
		}, Options{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := setupOn(t, tc.opts, tc.dial)
			tb.worker.Handle("job", func(context.Context, *Job) error { return nil })
			tb.start(t)
			bs, h := tb.stream(t)
			if h.GetMovable() != tc.movable {
				t.Fatalf("Hello.movable = %v, want %v", h.GetMovable(), tc.movable)
			}
			bs.welcome()
			tb.shutdown(t, bs)
		})
	}
}
