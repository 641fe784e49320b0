package commit

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"time"

	"github.com/jobwire/jobwire/internal/stages"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/storeretry"
)

// StartWindow is how long a start may wait for its job's result to join it in one commit.
// Most jobs finish within a commit or two of starting; their start then costs no write at all
// (see Starter). The wait only delays when storage shows RUNNING, never a message to a worker
// or producer; it is a property of group commit, not a scheduling decision, so it runs on the
// wall clock.
const StartWindow = 2 * time.Millisecond

// A batch that carried at least crowdInserts enqueues shows many producers each waiting on a
// commit. Before taking the next batch the writer then yields its thread crowdYields times, so
// that the calls already on their way (decoded, their goroutines ready to run) join it: the
// commit's log pages, locks and receipt then serve more jobs. Measured with 64 producers on
// SQLite: 1.1-1.2x the jobs a second at 0.8-0.9x the broker's CPU a job. A lone producer's
// batches never reach it, so it adds nothing to a lone enqueue's wait; nor do results and
// batches of jobs, which arrive as few ops however busy the broker is.
const (
	crowdInserts = 8
	crowdYields  = 2
)

// Grouped is the group-commit writer: it takes every op that is waiting (up to MaxBatch) and
// commits them in one transaction, with its owner's dispatch round (Owner.Round) as the
// batch's last op. On a store with a round trip per statement, a batch of N starts, successes
// or inserts costs one or two statements, not N or 2N.
type Grouped struct {
	queue
	batch []*Ticket
	held  []*Ticket // starts waiting one batch for their results, results for an enqueue
	g     grouped
	// inserted is when the last batch that inserted jobs committed: within Window of it a
	// producer is taken to be enqueueing (deferResults).
	inserted time.Time
	deferred func() // tests only: told each time a batch is deferred
	// crowded is whether the last batch committed came from a crowd of producers (crowdInserts).
	crowded bool
}

// NewGrouped returns a group-commit writer; Run runs it.
func NewGrouped(cfg Config) *Grouped {
	return &Grouped{queue: newQueue(cfg), batch: make([]*Ticket, 0, cfg.MaxBatch+1)}
}

// Run writes batches until Config.Stop is closed.
func (w *Grouped) Run() {
	window := time.NewTimer(time.Hour)
	window.Stop()
	for {
		w.batch = append(w.batch[:0], w.held...)
		w.held = w.held[:0]
		wait := window.C
		if len(w.batch) == 0 {
			wait = nil
		} else {
			window.Reset(w.cfg.Window)
		}
		asked := false
		select {
		case t := <-w.in:
			w.add(t)
		case <-w.wake:
			asked = true
		case <-wait:
		case <-w.cfg.Stop:
			for _, t := range w.batch {
				t.done(w.cfg.Stopped)
			}
			w.failPending()
			return
		}
		window.Stop()
		if w.crowded {
			for range crowdYields {
				runtime.Gosched()
			}
		}
		asked = w.fill() || asked
		markIf(tracedIn(w.batch), stages.Taken)
		w.next(asked)
	}
}

func (w *Grouped) add(t *Ticket) {
	if t.take() {
		w.batch = append(w.batch, t)
	}
}

// fill takes the ops waiting, up to MaxBatch, and reports whether a round was asked for.
func (w *Grouped) fill() (asked bool) {
	for len(w.batch) < w.cfg.MaxBatch {
		select {
		case t := <-w.in:
			w.add(t)
		case <-w.wake:
			asked = true
		default:
			return asked
		}
	}
	return asked
}

// next holds back the starts that wait for their results, adds the owner's round and commits.
func (w *Grouped) next(asked bool) {
	markSuperseded(w.batch)
	if !asked && w.deferResults(w.batch) {
		w.held = append(w.held, w.batch...)
		if w.deferred != nil {
			w.deferred()
		}
		return
	}
	w.batch, w.held = holdStarts(w.batch, w.held)
	ops := w.opsOf(w.batch)
	if o := w.cfg.Owner.Round(ops, asked, slices.ContainsFunc(ops, readies)); o != nil {
		w.batch = append(w.batch, &Ticket{op: o})
		ops = append(ops, o)
	}
	if len(w.batch) > 0 {
		w.commit(w.batch, ops)
	}
}

// holdStarts moves out of batch the starts seen for the first time whose result is not in
// it, so that they wait one batch (at most StartWindow) for it.
func holdStarts(batch, held []*Ticket) ([]*Ticket, []*Ticket) {
	keep := batch[:0]
	for _, t := range batch {
		if _, ok := t.op.(Starter); ok && !t.superseded && !t.waited {
			t.waited = true
			held = append(held, t)
			continue
		}
		keep = append(keep, t)
	}
	return keep, held
}

// deferResults reports whether batch is to wait one batch (at most Window) for a producer's
// next enqueue, and marks its tickets as having waited if so. It does when batch holds results
// that may wait (Deferrer) seen for the first time and nothing else but starts that have not
// waited yet or that their results supersede, no round was asked for, and a batch inserted
// jobs within Window: the result then most likely shares the next enqueue's commit, and waits
// out the window only when that enqueue does not come.
func (w *Grouped) deferResults(batch []*Ticket) bool {
	results := false
	for _, t := range batch {
		switch o := t.op.(type) {
		case Deferrer:
			if t.waited || !o.MayWait() {
				return false
			}
			results = true
		case Starter:
			if t.waited && !t.superseded {
				return false
			}
		default:
			return false
		}
	}
	if !results || w.cfg.Now().Sub(w.inserted) >= w.cfg.Window {
		return false
	}
	for _, t := range batch {
		t.waited = true
	}
	return true
}

// markSuperseded flags the starts whose lease's result is in the same batch.
func markSuperseded(batch []*Ticket) {
	var finishing map[job.LeaseRef]bool
	for _, t := range batch {
		if f, ok := t.op.(Finisher); ok {
			if finishing == nil {
				finishing = make(map[job.LeaseRef]bool)
			}
			finishing[f.Finishes()] = true
		}
	}
	if finishing == nil {
		return
	}
	for _, t := range batch {
		if s, ok := t.op.(Starter); ok && finishing[s.StartParams().Ref] {
			t.superseded = true
		}
	}
}

// commit writes batch, whose ops are ops, in one transaction and answers its ops.
func (w *Grouped) commit(batch []*Ticket, ops []Op) {
	// Commit timing is a measurement of storage, not a decision, so it reads the wall clock.
	began := time.Now()
	err := w.write(batchContext(w.cfg.Ctx, batch), batch, ops, &w.g, true)
	w.cfg.Observe(len(batch), time.Since(began), err)
	enqueues := enqueuesIn(ops)
	w.crowded = enqueues >= crowdInserts
	if err == nil && enqueues > 0 {
		w.inserted = w.cfg.Now()
	}
	w.finish(batch, err, w.g.offered)
}

// enqueuesIn counts the enqueues among ops: whether a batch inserted jobs (Grouped.inserted)
// and whether a crowd of producers sent it (crowdInserts) are both read from it.
func enqueuesIn(ops []Op) int {
	n := 0
	for _, o := range ops {
		if inserts(o) {
			n++
		}
	}
	return n
}

// finish answers batch's ops once its write ended with err. A batch that failed as a whole for
// one op's sake is written again without the callers that stopped waiting, or op by op, so
// that only the faulty op fails. So is a lone op whose jobs were offered (offered): written
// alone it stores them as any enqueue does, so that a lease the store refused does not fail
// the enqueue.
func (w *Grouped) finish(batch []*Ticket, err error, offered bool) {
	if busy, ok := errors.AsType[*storeretry.BusyError](err); ok && busy.StoppedForDeadline() {
		// The retries stopped for the callers with a deadline; the others (worker messages,
		// dispatch) are owed the whole retry budget, so they go on without those callers.
		var rest []*Ticket
		for _, t := range batch {
			if t.deadline.IsZero() {
				rest = append(rest, t)
				continue
			}
			t.done(err)
		}
		if len(rest) > 0 {
			w.commit(rest, w.opsOf(rest))
		}
		return
	}
	// Busy or unavailable storage already had its retries; splitting would only wait them out
	// once per op.
	if err != nil && (len(batch) > 1 || offered) && !errors.Is(err, context.Canceled) && !errors.Is(err, storeretry.ErrBusy) &&
		!errors.Is(err, store.ErrUnavailable) {
		// One op's error must not fail the others: run each alone so only the faulty one fails.
		// A lease that counted the slots of the batch's results fails with the batch: alone, it
		// could hand a worker a job for a slot whose result was not stored.
		for _, t := range batch {
			if boundToBatch(t.op) {
				t.done(err)
				continue
			}
			t.superseded = false
			alone := []*Ticket{t}
			t.done(w.write(w.cfg.Ctx, alone, w.opsOf(alone), nil, true))
		}
		return
	}
	for _, t := range batch {
		t.done(err)
	}
}

// grouped gathers the writes of a batch that are stored many to a statement: successes
// (tx.JobSucceedManyAtCommit), starts (tx.JobStartMany) and the jobs of inserts (tx.JobInsertMany,
// or tx.JobInsertOfferedAtCommit when some are offered).
type grouped struct {
	succeeding []Succeeder
	starting   []Starter
	inserting  []Inserter
	inserted   []int // the number of jobs of each of inserting
	successes  []*store.JobFinishParams
	starts     []*store.JobStartParams
	inserts    []*store.JobInsertParams
	offered    bool // the inserts went with offers (tx.JobInsertOfferedAtCommit)
}

// reset empties g for another run of the transaction.
func (g *grouped) reset() {
	g.succeeding, g.starting, g.inserting, g.inserted = g.succeeding[:0], g.starting[:0], g.inserting[:0], g.inserted[:0]
	g.successes, g.starts, g.inserts = g.successes[:0], g.starts[:0], g.inserts[:0]
	g.offered = false
}

// add takes t's op into the group of its write, and reports false for an op that writes alone.
// A superseded start writes nothing and is left to apply.
func (g *grouped) add(t *Ticket) bool {
	if t.superseded {
		return false
	}
	switch o := t.op.(type) {
	case Inserter:
		ps := o.Insert()
		if ps == nil {
			return false
		}
		g.inserting, g.inserted, g.inserts = append(g.inserting, o), append(g.inserted, len(ps)), append(g.inserts, ps...)
	case Succeeder:
		p := o.Success()
		if p == nil {
			return false
		}
		g.succeeding, g.successes = append(g.succeeding, o), append(g.successes, p)
	case Starter:
		g.starting, g.starts = append(g.starting, o), append(g.starts, o.StartParams())
	default:
		return false
	}
	return true
}

// write stores what g gathered and tells each op its outcome.
func (g *grouped) write(tx store.Tx) error {
	if len(g.inserts) > 0 {
		results, err := g.insert(tx)
		if err != nil {
			return err
		}
		for i, o := range g.inserting {
			n := g.inserted[i]
			o.Inserted(tx, results[:n:n])
			results = results[n:]
		}
	}
	if len(g.starts) > 0 {
		started, err := tx.JobStartMany(g.starts)
		if err != nil {
			return err
		}
		for i, o := range g.starting {
			o.Started(started[i])
		}
	}
	if len(g.successes) > 0 {
		// The store may send the successes with COMMIT: nothing later in the transaction
		// depends on their answer. A success whose answer cannot be read is told so, and its
		// op answers it as storage's failure.
		succeeding := g.succeeding
		for _, o := range succeeding {
			o.Succeeded(false, ErrAnswerLost)
		}
		err := tx.JobSucceedManyAtCommit(g.successes, func(succeeded []bool, err error) {
			for i, o := range succeeding {
				o.Succeeded(err == nil && succeeded[i], err)
			}
		})
		return err
	}
	return nil
}

// insert stores the gathered jobs, leasing those offered to a worker if any are.
func (g *grouped) insert(tx store.Tx) ([]store.JobInsertResult, error) {
	var offers []*store.JobOffer // one per job, nil where not offered; nil when none is
	var offering []Offerer       // one per op of inserting, nil where it offers nothing
	at := 0                      // op i's first job
	for i, o := range g.inserting {
		n := g.inserted[i]
		if of, some := offered(o); some != nil {
			if offers == nil {
				offers, offering = make([]*store.JobOffer, len(g.inserts)), make([]Offerer, len(g.inserting))
			}
			of.Leased(nil)
			offering[i] = of
			copy(offers[at:at+n], some)
		}
		at += n
	}
	if offers == nil {
		return tx.JobInsertMany(g.inserts)
	}
	inserted := g.inserted
	g.offered = true
	return tx.JobInsertOfferedAtCommit(g.inserts, offers, func(leased []*job.Job, err error) {
		if err != nil {
			return
		}
		for i, o := range offering {
			n := inserted[i]
			if o != nil {
				o.Leased(leased[:n:n])
			}
			leased = leased[n:]
		}
	})
}

// offered is o as an Offerer with its offers, or nil offers when it offers none of its jobs.
func offered(o Inserter) (Offerer, []*store.JobOffer) {
	of, ok := o.(Offerer)
	if !ok {
		return nil, nil
	}
	return of, of.Offers()
}
