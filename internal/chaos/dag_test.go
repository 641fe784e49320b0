package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
	"github.com/jobwire/jobwire/worker"
)

// dagLedger records, for each job of a graph, how many times its handler started and the
// order in which handlers started and returned, on one clock of sequence numbers.
type dagLedger struct {
	mu      sync.Mutex
	seq     int
	runs    map[int64]int
	started map[int64]int // the sequence number of the last start
	done    map[int64]int // the sequence number of the last successful return
	wrong   []string      // parents' results that were not what the handler expected
}

func (l *dagLedger) handle(ctx context.Context, j *worker.Job) error {
	l.mu.Lock()
	l.seq++
	l.runs[j.ID]++
	l.started[j.ID] = l.seq
	for _, p := range j.ParentResults {
		if p.State != "succeeded" || string(p.Result) != strconv.FormatInt(p.JobID, 10) {
			l.wrong = append(l.wrong, fmt.Sprintf("job %d: parent %d %s with result %q", j.ID, p.JobID, p.State, p.Result))
		}
	}
	l.mu.Unlock()
	select { // a little work, so that the graph is still running when a broker is killed
	case <-time.After(time.Duration(j.ID%4) * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	j.SetResult([]byte(strconv.FormatInt(j.ID, 10)))
	l.mu.Lock()
	l.seq++
	l.done[j.ID] = l.seq
	l.mu.Unlock()
	return nil
}

func (l *dagLedger) finished() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.done)
}

// dagNodes is a graph of n nodes drawn from rng: node i depends on up to three earlier nodes,
// most of them close before it, so that the graph is deep as well as wide. The nodes are given
// in a shuffled order: the broker orders them.
func dagNodes(rng *rand.Rand, n int) []client.GraphNode {
	nodes := make([]client.GraphNode, n)
	for i := range n {
		key := fmt.Sprintf("n%d", i)
		nodes[i] = client.GraphNode{Key: key, Spec: client.JobSpec{Type: "dag", MaxAttempts: 5, Metadata: map[string]string{"node": key}}}
		seen := map[int]bool{}
		for range rng.IntN(4) {
			if i == 0 {
				break
			}
			p := i - 1 - rng.IntN(min(i, 20))
			if !seen[p] {
				seen[p] = true
				nodes[i].DependsOn = append(nodes[i].DependsOn, fmt.Sprintf("n%d", p))
			}
		}
	}
	rng.Shuffle(n, func(a, b int) { nodes[a], nodes[b] = nodes[b], nodes[a] })
	return nodes
}

// A graph of 1,000 jobs enqueued in one call through two brokers on one database runs every
// job exactly once, each after all its parents returned, with its parents' results, while one
// broker is killed with SIGKILL in the middle and started again. The leases are longer than a
// worker's move to the other broker takes, so that a job held across the kill is adopted, not
// run again.
func TestDAGRunsInOrderOnceAcrossAKilledBroker(t *testing.T) {
	db := pgtest.URL(t)
	dir := t.TempDir()
	brokers := newBrokerSet(t, 2, db, dir)
	config := strings.Replace(brokerConfig, "lease_duration: 2s", "lease_duration: 20s", 1)
	if err := os.WriteFile(brokers.config, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	brokers.startAll(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*frozenWait)
	defer cancel()
	seed := readSettings(t).seed
	t.Logf("seed %d (%s to repeat)", seed, envSeed)
	const n = 1000
	nodes := dagNodes(rand.New(rand.NewPCG(seed, seed)), n)

	l := &dagLedger{runs: map[int64]int{}, started: map[int64]int{}, done: map[int64]int{}}
	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	wait, err := startFleet(workCtx, fleet{name: "dag", n: 4, slots: 8, addrs: brokers.addrs,
		handlers: map[string]worker.HandlerFunc{"dag": l.handle}, logPath: filepath.Join(dir, "workers.log")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		stopWork()
		if err := wait(); err != nil && ctx.Err() == nil {
			t.Errorf("workers: %v", err)
		}
	}()

	pc, err := client.DialBrokers(ctx, brokers.addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	pg, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(context.Background())
	began := time.Now()
	g, err := enqueueGraph(ctx, pc, pg, nodes)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a third of the graph to run", func() bool { return l.finished() >= n/3 })
	brokers.kill(1)
	killedAt, killedAfter := l.finished(), time.Since(began)
	if err := brokers.start(1); err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, 0, n)
	for _, r := range g.Jobs {
		ids = append(ids, r.ID)
	}
	waitUntil(t, "every job of the graph to finish", func() bool {
		left, err := unfinished(ctx, pg, ids)
		return err == nil && left == 0
	})
	took := time.Since(began)
	var notSucceeded int
	if err := pg.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE id = ANY($1) AND state <> 5`, ids).Scan(&notSucceeded); err != nil {
		t.Fatal(err)
	}
	if notSucceeded > 0 {
		t.Errorf("%d of %d jobs did not succeed", notSucceeded, n)
	}
	checkDAGOrder(t, l, nodes, g)
	t.Logf("%d-job graph done in %s (wall time from the enqueue); broker 1 killed at %s, after %d had run", n,
		took.Round(time.Millisecond), killedAfter.Round(time.Millisecond), killedAt)
	if p := brokers.problems(); len(p) > 0 {
		t.Fatalf("the brokers' logs show problems:\n%s", strings.Join(p, "\n"))
	}
}

// enqueueGraph enqueues nodes as a producer must: a call that may or may not have been applied
// (UNAVAILABLE from a broker that found its database silent, as a loaded machine makes it) is
// looked up before it is sent again. The graph is all or nothing, so it is either wholly there,
// found by the node keys its jobs carry in their metadata, or not there at all.
func enqueueGraph(ctx context.Context, pc *client.Client, pg *pgx.Conn, nodes []client.GraphNode) (*client.GraphResult, error) {
	for try := 1; ; try++ {
		g, err := pc.EnqueueGraph(ctx, nodes)
		if err == nil || !errors.Is(err, client.ErrUnavailable) || try == 5 {
			return g, err
		}
		rows, qerr := pg.Query(ctx, `SELECT id, metadata->>'node' FROM jobs WHERE type = 'dag' ORDER BY id`)
		if qerr != nil {
			return nil, qerr
		}
		found := &client.GraphResult{ByKey: map[string]int64{}}
		for rows.Next() {
			var id int64
			var key string
			if err := rows.Scan(&id, &key); err != nil {
				return nil, err
			}
			found.ByKey[key] = id
		}
		rows.Close()
		if len(found.ByKey) == 0 {
			time.Sleep(200 * time.Millisecond) // the broker refuses calls until its database answers
			continue
		}
		for _, nd := range nodes {
			found.Jobs = append(found.Jobs, client.EnqueueResult{ID: found.ByKey[nd.Key]})
		}
		return found, nil
	}
}

// checkDAGOrder checks that every job ran once, after every parent returned, and saw its
// parents' results.
func checkDAGOrder(t *testing.T, l *dagLedger, nodes []client.GraphNode, g *client.GraphResult) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	problems := 0
	report := func(format string, args ...any) {
		if problems++; problems <= 10 {
			t.Errorf(format, args...)
		}
	}
	for _, nd := range nodes {
		id := g.ByKey[nd.Key]
		if l.runs[id] != 1 {
			report("job %d (%s) ran %d times, want once", id, nd.Key, l.runs[id])
		}
		for _, p := range nd.DependsOn {
			pid := g.ByKey[p]
			if l.done[pid] == 0 || l.done[pid] > l.started[id] {
				report("job %d (%s) started at %d, before its parent %d (%s) returned (at %d)", id, nd.Key, l.started[id], pid, p, l.done[pid])
			}
		}
	}
	for _, w := range l.wrong {
		report("%s", w)
	}
}
