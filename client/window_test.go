package client_test

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/worker"
)

// frames counts the HTTP/2 PING frames (not their acknowledgements) in one direction of a
// connection, read as the bytes pass.
type frames struct {
	mu      sync.Mutex
	preface int    // bytes of the client's connection preface still to skip
	head    []byte // a frame header read in part
	skip    int    // bytes of the current frame's payload still to pass
	pings   int
}

func (f *frames) feed(p []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(p) > 0 {
		switch {
		case f.preface > 0:
			n := min(f.preface, len(p))
			f.preface, p = f.preface-n, p[n:]
		case f.skip > 0:
			n := min(f.skip, len(p))
			f.skip, p = f.skip-n, p[n:]
		default:
			n := min(9-len(f.head), len(p))
			f.head, p = append(f.head, p[:n]...), p[n:]
			if len(f.head) < 9 {
				continue
			}
			length := int(binary.BigEndian.Uint32(append([]byte{0}, f.head[:3]...)))
			const ping, ack = 0x6, 0x1
			if f.head[3] == ping && f.head[4]&ack == 0 {
				f.pings++
			}
			f.head, f.skip = f.head[:0], length
		}
	}
}

func (f *frames) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pings
}

// countingConn counts the PING frames the client sends and those it receives.
type countingConn struct {
	net.Conn
	sent, received *frames
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.sent.feed(p)
	return c.Conn.Write(p)
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.received.feed(p[:n])
	return n, err
}

// dialCounting dials the broker of b through client.Dial, counting the PING frames the
// connection sends and receives.
func dialCounting(t *testing.T, b *brokertest.Bundle) (c *client.Client, sent, received *frames) {
	t.Helper()
	sent, received = &frames{preface: len("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")}, &frames{}
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: conn, sent: sent, received: received}, nil
	}
	c, err := client.Dial(context.Background(), b.Addr, client.WithDialOptions(grpc.WithContextDialer(dialer)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, sent, received
}

// wantNoPings fails t if either side of a counted connection pinged the other.
func wantNoPings(t *testing.T, sent, received *frames, what string) {
	t.Helper()
	if n := sent.count(); n != 0 {
		t.Errorf("the SDK sent %d pings for %s", n, what)
	}
	if n := received.count(); n != 0 {
		t.Errorf("the broker sent %d pings for %s", n, what)
	}
}

// Neither the Go SDK nor the broker pings the other while jobs are enqueued one at a time:
// their flow-control windows are fixed, so grpc-go does not probe the bandwidth-delay product
// with a PING for each burst of data it reads (an extra frame and wake-up each way per
// message).
func TestNoPingsPerMessage(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	c, sent, received := dialCounting(t, b)
	for range 100 {
		if _, err := c.Enqueue(context.Background(), "t", []byte(`{"n":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	wantNoPings(t, sent, received, "100 enqueues")
}

// Nor do a Go worker on a client.Dial connection and the broker, for jobs handed out one at a
// time and their results.
func TestNoPingsPerJob(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	c, sent, received := dialCounting(t, b)
	ran := make(chan struct{})
	w, err := worker.New(c.Conn(), worker.Options{ID: "w", Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("t", func(context.Context, *worker.Job) error {
		ran <- struct{}{}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()
	producer := client.New(b.Conn) // not counted
	for range 50 {
		if _, err := producer.Enqueue(context.Background(), "t", []byte(`{"n":1}`)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ran:
		case <-time.After(brokertest.WaitTimeout):
			t.Fatal("a job was not run")
		}
	}
	cancel()
	<-stopped
	wantNoPings(t, sent, received, "50 jobs run")
}
