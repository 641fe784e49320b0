package postgres

import (
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
	"github.com/jobwire/jobwire/store/reach"
)

// The heartbeat tells the tracker given to ReportReach that the database answers: a broker
// whose own write has waited past the bound stays up while the heartbeat is answered, and is
// down once its campaign stops.
func TestHeartbeatTellsTheBrokerItsDatabaseAnswers(t *testing.T) {
	t.Parallel()
	s := openBroker(t, pgtest.URL(t), nil)
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	tr := reach.New(clk, time.Second)
	s.ReportReach(tr)
	slow := tr.Begin() // a write that waits on a lock, say
	defer slow.End(reach.Abandoned)

	clk.Advance(2 * time.Second)
	if _, down := tr.Down(); !down {
		t.Fatal("up with a write waiting past the bound and nothing else answered")
	}
	c := newCampaigns(t)
	c.run(0, s)
	waitFor(t, "a heartbeat to say the database answers", func() bool {
		_, down := tr.Down()
		return !down
	})
	c.stop()
	clk.Advance(2 * time.Second)
	if _, down := tr.Down(); !down {
		t.Fatal("up with a write waiting past the bound and no heartbeat since")
	}
}
