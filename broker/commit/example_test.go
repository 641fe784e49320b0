package commit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/jobwire/jobwire/broker/commit"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/sqlite"
)

// enqueueOp stores one job: the decision that built it owns its fields, and its Done hears
// how the write ended once the transaction is over.
type enqueueOp struct {
	params *store.JobInsertParams
	id     int64
}

func (o *enqueueOp) Name() string { return "enqueue" }

func (o *enqueueOp) Apply(tx store.Tx) error {
	rs, err := tx.JobInsertMany([]*store.JobInsertParams{o.params})
	if err != nil {
		return err
	}
	o.id = rs[0].ID
	return nil
}

func (o *enqueueOp) Done(err error) {
	if err == nil {
		fmt.Println("stored job", o.id)
	}
}

// alone owns batches with no dispatch round and no lock order to keep.
type alone struct{}

func (alone) Round([]commit.Op, bool, bool) commit.Op { return nil }
func (alone) Begin(store.Tx, []commit.Op)             {}
func (alone) Flush(store.Tx) error                    { return nil }
func (alone) Written([]commit.Op, error)              {}

// A writer runs typed operations; a caller that waits holds a ticket.
func Example() {
	dir, _ := os.MkdirTemp("", "commit-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "jobwire.db"), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	stop := make(chan struct{})
	w := commit.NewGrouped(commit.Config{Store: st, Ctx: ctx, MaxBatch: 64, Owner: alone{}, Stop: stop,
		Stopped: errors.New("stopped")})
	done := make(chan struct{})
	go func() { w.Run(); close(done) }()

	now := time.Unix(1_700_000_000, 0)
	t := w.Enter(&enqueueOp{params: &store.JobInsertParams{Type: "mail", Queue: "default", Payload: []byte(`{}`),
		MaxAttempts: 3, RunAt: now, Now: now, AttemptTimeout: time.Minute}}, time.Time{})
	fmt.Println("answer:", <-t.Answer())
	close(stop)
	<-done
	// Output:
	// stored job 1
	// answer: <nil>
}
