package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// Calls through a connection to two brokers reach both while both are up, and only the one
// left once the other stops.
func TestDialBrokersSpreadsAndSurvivesABroker(t *testing.T) {
	t.Parallel()
	a, b := brokertest.New(t, brokertest.Options{}), brokertest.New(t, brokertest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.WaitTimeout)
	defer cancel()
	c, err := client.DialBrokers(ctx, []string{a.Addr, b.Addr}, client.WithBlock())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	queued := func(bd *brokertest.Bundle) int64 {
		st, err := client.New(bd.Conn).GetStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, q := range st.Counts {
			n += q.Count
		}
		return n
	}
	// Round robin starts once both connections are up; until then calls go to the first ready.
	for queued(a) == 0 || queued(b) == 0 {
		if _, err := c.Enqueue(ctx, "spread", nil); err != nil {
			t.Fatalf("enqueue with both brokers up: %v", err)
		}
		if ctx.Err() != nil {
			t.Fatal("calls never reached both brokers")
		}
	}

	a.Stop()
	// A call that was on its way to the stopped broker may fail; once the connection has seen
	// it go, every call goes to the other.
	for {
		if _, err := c.Enqueue(ctx, "after", nil); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("no call succeeded after one broker stopped")
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := queued(b)
	for range 10 {
		if _, err := c.Enqueue(ctx, "after", nil); err != nil {
			t.Fatalf("enqueue with one broker down: %v", err)
		}
	}
	if got := queued(b); got != before+10 {
		t.Errorf("the broker left up holds %d jobs, want %d", got, before+10)
	}
}

func TestDialBrokersNeedsAddresses(t *testing.T) {
	t.Parallel()
	for _, addrs := range [][]string{nil, {"127.0.0.1:1", ""}} {
		if c, err := client.DialBrokers(context.Background(), addrs); err == nil {
			_ = c.Close()
			t.Errorf("DialBrokers(%q) = nil error", addrs)
		}
	}
}
