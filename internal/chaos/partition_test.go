package chaos

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// envPartitionFor, when set (a duration), makes TestPartitionedBrokerIsLeft a measurement: the
// partition lasts that long, whatever the brokers do, and the test only reports the producer's
// longest stall.
const envPartitionFor = "JOBWIRE_PARTITION_FOR"

// partitionCallTimeout bounds each enqueue of TestPartitionedBrokerIsLeft: far above what a
// broker that answers needs, even on a loaded machine, so that an enqueue that fails with it was
// held by the broker cut off from its database.
const partitionCallTimeout = 20 * time.Second

// stallProducer enqueues one job at a time, each with an idempotency key of its own, and keeps when
// each succeeded and why any failed.
type stallProducer struct {
	mu    sync.Mutex
	ok    []time.Time
	fails []string
}

func (p *stallProducer) run(ctx context.Context, c *client.Client) {
	for i := 0; ctx.Err() == nil; i++ {
		cctx, cancel := context.WithTimeout(ctx, partitionCallTimeout)
		began := time.Now()
		_, err := c.Enqueue(cctx, jobTypes[0], []byte(`{}`), client.IdempotencyKey(fmt.Sprint("partition-", i)))
		cancel()
		p.mu.Lock()
		switch {
		case err == nil:
			p.ok = append(p.ok, time.Now())
		case ctx.Err() == nil:
			p.fails = append(p.fails, fmt.Sprintf("enqueue %d, sent %s: %v", i, began.Format(time.StampMilli), err))
		}
		p.mu.Unlock()
	}
}

// succeeded is how many enqueues succeeded.
func (p *stallProducer) succeeded() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ok)
}

// stall is the longest gap between two successful enqueues, and when it began.
func (p *stallProducer) stall() (time.Duration, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var longest time.Duration
	var at time.Time
	for i := 1; i < len(p.ok); i++ {
		if d := p.ok[i].Sub(p.ok[i-1]); d > longest {
			longest, at = d, p.ok[i-1]
		}
	}
	return longest, at
}

// servingStatus asks the broker at addr for its health.
func servingStatus(ctx context.Context, conn *grpc.ClientConn) healthpb.HealthCheckResponse_ServingStatus {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN
	}
	return res.GetStatus()
}

// Three brokers on one PostgreSQL database, the first reaching it through a proxy, and a
// producer that enqueues through all three (client.DialBrokers). The proxy blackholes the
// first broker's connections: it says NOT_SERVING, and every enqueue succeeds on the others,
// the ones it held among them. Once the proxy heals, it serves again. The producer's longest
// stall (the longest gap between two successful enqueues) is logged.
func TestPartitionedBrokerIsLeft(t *testing.T) {
	db := pgtest.URL(t)
	var measureFor time.Duration
	if v := os.Getenv(envPartitionFor); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", envPartitionFor, v, err)
		}
		measureFor = d
	}
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newPartitionProxy(t, u.Host)
	via := *u
	via.Host = proxy.Addr()
	dir := t.TempDir()
	const n = 3
	brokers := newBrokerSet(t, n, db, dir)
	brokers.dbs = map[int]string{0: via.String()}
	brokers.startAll(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*frozenWait)
	defer cancel()
	c, err := client.DialBrokers(ctx, brokers.addrs, client.WithBlock())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cut, err := grpc.NewClient(brokers.addrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cut.Close()

	var p stallProducer
	prodCtx, stopProducer := context.WithCancel(ctx)
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		p.run(prodCtx, c)
	}()
	more := func(what string, k int) {
		t.Helper()
		target := p.succeeded() + k
		waitUntil(t, what, func() bool { return p.succeeded() >= target })
	}
	more("enqueues before the partition", 100)

	proxy.Blackhole()
	cutAt := time.Now()
	if measureFor > 0 {
		time.Sleep(measureFor) // the scenario itself: a partition this long
	} else {
		waitUntil(t, "the broker cut off to say NOT_SERVING", func() bool {
			return servingStatus(ctx, cut) == healthpb.HealthCheckResponse_NOT_SERVING
		})
		t.Logf("the broker cut off said NOT_SERVING %s after the cut", time.Since(cutAt).Round(time.Millisecond))
		more("enqueues during the partition", 200)
	}
	proxy.Heal()
	healedAt := time.Now()
	if measureFor == 0 {
		waitUntil(t, "the broker cut off to serve again", func() bool {
			return servingStatus(ctx, cut) == healthpb.HealthCheckResponse_SERVING
		})
		t.Logf("it served again %s after the partition healed", time.Since(healedAt).Round(time.Millisecond))
	}
	more("enqueues after the partition", 100)
	stopProducer()
	<-produced

	stall, at := p.stall()
	t.Logf("longest producer stall: %s, from %s after the cut (partition of %s, %d enqueues)",
		stall.Round(time.Millisecond), at.Sub(cutAt).Round(time.Millisecond), healedAt.Sub(cutAt).Round(time.Millisecond), p.succeeded())
	if len(p.fails) > 0 {
		t.Fatalf("%d enqueues failed:\n%s", len(p.fails), strings.Join(p.fails, "\n"))
	}
}
