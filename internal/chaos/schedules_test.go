package chaos

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jobwire/jobwire/broker"
	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// scheduleConfig declares, besides the chaos brokers' settings, a schedule firing every second
// that catches up every occurrence it misses, so that each second from its first occurrence to
// its last must have exactly one job.
const scheduleConfig = brokerConfig + `schedules:
  - name: tick
    cron: "@every 1s"
    type: chaos.tick
    overlap: allow_all
    catch_up: all
    catch_up_window: 1h
`

// scheduleKills is how many times TestScheduleLeaderKilledAtFireTimes kills the leader.
const scheduleKills = 6

// Two `jobwire serve` processes on one PostgreSQL database share a schedule that fires every
// second. Again and again the leader is killed with SIGKILL right as a fire time comes, and
// restarted once the other leads. Afterwards every second from the schedule's first occurrence
// to its last has exactly one job: none enqueued twice by the broker that took over, none lost.
func TestScheduleLeaderKilledAtFireTimes(t *testing.T) {
	db := pgtest.URL(t)
	dir := t.TempDir()
	brokers := newBrokerSet(t, 2, db, dir)
	if err := os.WriteFile(brokers.config, []byte(scheduleConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	brokers.startAll(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.DialBrokers(ctx, brokers.addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var firstKill time.Time
	for k := range scheduleKills {
		leader := waitLeader(t, ctx, c, brokers)
		// Right after a whole second: the fire time the leader's alarm is set for.
		now := time.Now()
		time.Sleep(now.Truncate(time.Second).Add(time.Second + time.Duration(k)*time.Millisecond).Sub(now))
		brokers.kill(leader)
		if k == 0 {
			firstKill = time.Now()
		}
		other := 1 - leader
		waitUntil(t, "the other broker to lead", func() bool { return leads(ctx, c, brokers.addrs[other]) })
		if err := brokers.start(leader); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1500 * time.Millisecond) // a last occurrence or two with both brokers up
	brokers.kill(0)
	brokers.kill(1)
	if err := brokers.start(0); err != nil { // to read the jobs through; it may fire a last one
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	brokers.kill(0)
	if err := brokers.start(0); err != nil {
		t.Fatal(err)
	}
	c0, err := client.Dial(ctx, brokers.addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c0.Close()
	if _, err := c0.PauseSchedule(ctx, "tick", "the test is reading"); err != nil {
		t.Fatal(err)
	}
	fires := tickFires(t, ctx, c0)
	if len(fires) < scheduleKills || fires[0].After(firstKill) {
		t.Fatalf("%d occurrences were enqueued, the first at %v; want one a second from before the first kill (%v) on", len(fires), fires[0], firstKill)
	}
	for i := 1; i < len(fires); i++ {
		switch d := fires[i].Sub(fires[i-1]); {
		case d == 0:
			t.Errorf("the occurrence of %s has two jobs", fires[i].Format(time.RFC3339))
		case d != time.Second:
			t.Errorf("no job for the occurrences between %s and %s", fires[i-1].Format(time.RFC3339), fires[i].Format(time.RFC3339))
		}
	}
	t.Logf("%d occurrences from %s to %s, %d kills", len(fires), fires[0].Format(time.RFC3339), fires[len(fires)-1].Format(time.RFC3339), brokers.kills)
	if p := brokers.problems(); len(p) > 0 {
		t.Errorf("the brokers' logs show problems:\n%s", p)
	}
}

// waitLeader waits until a broker that runs leads, and returns it.
func waitLeader(t *testing.T, ctx context.Context, c *client.Client, brokers *brokerSet) int {
	t.Helper()
	leader := -1
	waitUntil(t, "a broker to lead", func() bool {
		for _, i := range brokers.live() {
			if leads(ctx, c, brokers.addrs[i]) {
				leader = i
				return true
			}
		}
		return false
	})
	return leader
}

// leads reports whether the broker at addr says it leads.
func leads(ctx context.Context, c *client.Client, addr string) bool {
	list, err := c.ListBrokers(ctx)
	if err != nil {
		return false
	}
	for _, b := range list {
		if b.Addr == addr && b.Leader && b.Alive {
			return true
		}
	}
	return false
}

// tickFires reads the fire time of every job the schedule enqueued, in order.
func tickFires(t *testing.T, ctx context.Context, c *client.Client) []time.Time {
	t.Helper()
	var fires []time.Time
	for j, err := range c.AllJobs(ctx, &client.ListJobsParams{Type: "chaos.tick"}) {
		if err != nil {
			t.Fatal(err)
		}
		full, err := c.Get(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		at, err := broker.ParseFireTime(full.Metadata[broker.MetadataScheduleFire])
		if err != nil {
			t.Fatal(fmt.Errorf("job %d: %w", j.ID, err))
		}
		fires = append(fires, at)
	}
	slices.SortFunc(fires, time.Time.Compare)
	return fires
}
