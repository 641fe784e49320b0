package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// A broker whose database stops answering answers UNAVAILABLE at the bound and says NOT_SERVING:
// the enqueue it held (with an idempotency key) is sent to the other broker, and every call
// after it, with a key or without, goes there too.
func TestDialBrokersLeavesABrokerThatCannotReachItsDatabase(t *testing.T) {
	t.Parallel()
	ctx, faults, a, _, c := dialSilentPair(t)

	entered, release := faults.Hold("enqueue")
	defer release()
	// Keyed enqueues, one at a time, until one reaches a and waits there.
	held := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			_, err := c.Enqueue(ctx, "mail", nil, client.IdempotencyKey(fmt.Sprint("k", i)))
			select {
			case <-entered: // this call reached a, and waited there
				held <- err
				return
			default:
			}
			if err != nil {
				held <- fmt.Errorf("before any call reached a: %w", err)
				return
			}
		}
	}()
	select {
	case <-entered:
	case err := <-held:
		t.Fatal(err)
	case <-ctx.Done():
		t.Fatal("no enqueue reached a")
	}
	a.Clock.Advance(time.Second)
	// The held call comes back UNAVAILABLE (its write may have been applied); its key makes it
	// safe to send to b, where it succeeds.
	select {
	case err := <-held:
		if err != nil {
			t.Fatalf("the enqueue that reached a: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the enqueue that reached a was not answered")
	}
	waitNotServing(ctx, t, a)
	for i := range 20 {
		if _, err := c.Enqueue(ctx, "after", nil); err != nil {
			t.Fatalf("enqueue %d without a key while a cannot reach its database: %v", i, err)
		}
	}
	for i := range 5 {
		if _, err := c.ListQueues(ctx); err != nil {
			t.Fatalf("read %d while a cannot reach its database: %v", i, err)
		}
	}
}

// With enqueue streams, a broker whose database stops answering ends the streams open on it
// as it says NOT_SERVING, so the enqueues after go to the other broker on new streams.
func TestDialBrokersWithEnqueueStreamsLeaveABrokerThatCannotReachItsDatabase(t *testing.T) {
	t.Parallel()
	ctx, faults, a, b, c := dialSilentPair(t, client.WithEnqueueStreams(4))

	// Round robin has both brokers (dialSilentPair), so it spreads the four streams that four
	// callers open over them. They enqueue until one enqueue waits on a.
	entered, release := faults.Hold("enqueue")
	defer release()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				_, err := c.Enqueue(ctx, "mail", nil, client.IdempotencyKey(fmt.Sprint("k", w, "-", i)))
				select {
				case <-entered:
					return // the held enqueue's answer, UNAVAILABLE, is its own: it was read
				default:
				}
				if err != nil {
					t.Errorf("before any enqueue reached a: %v", err)
					return
				}
			}
		})
	}
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("no enqueue reached a")
	}
	a.Clock.Advance(time.Second)
	wg.Wait()
	waitNotServing(ctx, t, a)
	// The client may not have seen a say NOT_SERVING yet: a refuses the streams opened there,
	// and each such Enqueue is made as a call, whose tries, among the other calls', may all go
	// to a (that window is TestEnqueueStreamEndedUnread's). So wait until it has left a out.
	untilOnlyB(ctx, t, c, b)
	for i := range 20 {
		wg.Go(func() {
			if _, err := c.Enqueue(ctx, "after", nil); err != nil {
				t.Errorf("enqueue %d while a cannot reach its database: %v", i, err)
			}
		})
	}
	wg.Wait()
}

// dialSilentPair starts broker a, whose database faults can silence (a held write makes it
// unreachable once its clock moves a second), and broker b, dials both with opts and returns
// once round robin has both; ctx bounds the test.
func dialSilentPair(t *testing.T, opts ...client.DialOption) (ctx context.Context, faults *brokertest.Faults, a, b *brokertest.Bundle, c *client.Client) {
	t.Helper()
	faults = brokertest.NewFaults(t, brokertest.DefaultFaultRetries)
	a = brokertest.New(t, brokertest.Options{Faults: faults, DatabaseSilence: time.Second})
	b = brokertest.New(t, brokertest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*brokertest.WaitTimeout)
	t.Cleanup(cancel)
	c, err := client.DialBrokers(ctx, []string{a.Addr, b.Addr}, append(opts, client.WithBlock())...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	untilBothInRotation(ctx, t, c, a, b)
	return ctx, faults, a, b, c
}

// untilBothInRotation makes calls, one at a time, until each broker has stored one, so that
// round robin has both. WithBlock waits for one broker only, and a call that a refuses goes
// to the next broker in the rotation: with b still connecting, every try of it went to a
// (seen under load, when the call a held was the first of the test).
func untilBothInRotation(ctx context.Context, t *testing.T, c *client.Client, a, b *brokertest.Bundle) {
	t.Helper()
	calls := jobwirev1.NewProducerServiceClient(c.Conn())
	for stored := map[string]bool{}; !stored[a.Addr] || !stored[b.Addr]; {
		if _, err := calls.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "spread"}}); err != nil {
			t.Fatal(err)
		}
		for _, bd := range []*brokertest.Bundle{a, b} {
			if st, err := client.New(bd.Conn).GetStats(ctx); err == nil && len(st.Counts) > 0 {
				stored[bd.Addr] = true
			}
		}
	}
}

// untilOnlyB waits until c's round robin has left a out: then ten calls in a row go to b,
// where with a in the rotation they would alternate.
func untilOnlyB(ctx context.Context, t *testing.T, c *client.Client, b *brokertest.Bundle) {
	t.Helper()
	health := healthpb.NewHealthClient(c.Conn())
	brokertest.WaitFor(t, "the client to send its calls to b only", func() bool {
		for range 10 {
			var p peer.Peer
			if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p)); err != nil ||
				p.Addr == nil || p.Addr.String() != b.Addr {
				return false
			}
		}
		return true
	})
}

// waitNotServing waits until broker a's health service says NOT_SERVING.
func waitNotServing(ctx context.Context, t *testing.T, a *brokertest.Bundle) {
	t.Helper()
	brokertest.WaitFor(t, "a to say NOT_SERVING", func() bool {
		res, err := healthpb.NewHealthClient(a.Conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && res.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING
	})
}
