package commit

import "time"

// Plain is the reference writer: it commits each op in a transaction of its own, with no
// statement shared between ops and no read sent with COMMIT, and runs a dispatch round in a
// transaction of its own after the op that asked for it. Grouped must behave as it does; the
// broker's behaviour tests run against both.
type Plain struct {
	queue
}

// NewPlain returns a writer of one op per transaction; Run runs it.
func NewPlain(cfg Config) *Plain { return &Plain{queue: newQueue(cfg)} }

// Run writes ops until Config.Stop is closed.
func (w *Plain) Run() {
	for {
		select {
		case t := <-w.in:
			if !t.take() {
				continue
			}
			w.commit(t)
			if readies(t.op) {
				w.round(false, true)
			}
		case <-w.wake:
			w.round(true, false)
		case <-w.cfg.Stop:
			w.failPending()
			return
		}
	}
}

// round writes the owner's dispatch round, if it plans one.
func (w *Plain) round(asked, ready bool) {
	if o := w.cfg.Owner.Round(nil, asked, ready); o != nil {
		w.commit(&Ticket{op: o})
	}
}

// commit writes t's op alone and answers it.
func (w *Plain) commit(t *Ticket) {
	batch := []*Ticket{t}
	began := time.Now()
	err := w.write(batchContext(w.cfg.Ctx, batch), batch, w.opsOf(batch), nil, false)
	w.cfg.Observe(1, time.Since(began), err)
	t.done(err)
}
