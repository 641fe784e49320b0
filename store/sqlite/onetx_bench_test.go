package sqlite

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// BenchmarkOneProducerTransaction is the write a lone producer's job costs the broker: one
// transaction that inserts the job and leases it, and stores the start and the success of the
// job before it (which ride the next enqueue's commit, commit.Grouped). It reports the log
// frames each commit writes (one page each, written with two pwrite calls), and with -v which
// tables and indexes those pages belong to: what a change to the schema or the statements of
// the hot path adds to or takes from every lone job.
//
//	go test -run '^$' -bench OneProducerTransaction -benchtime 2000x -v ./store/sqlite
func BenchmarkOneProducerTransaction(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "jobs.db")
	st, err := Open(ctx, path, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	stopCheckpoints(ctx, b, st)
	write := func(prev *job.Job, now time.Time) *job.Job {
		if err := st.Write(ctx, "one_producer", func(tx store.Tx) error {
			var err error
			prev, err = oneProducerWrite(tx, prev, now)
			return err
		}); err != nil {
			b.Fatal(err)
		}
		return prev
	}
	now := time.Unix(1_800_000_000, 0)
	// The first write may rewind the log, which the checkpoints before left all copied.
	prev := write(nil, now)
	start := readLog(b, path)
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		n++
		now = now.Add(time.Millisecond)
		prev = write(prev, now)
	}
	log := readLog(b, path)
	b.ReportMetric(float64(len(log.pages)-len(start.pages))/float64(n), "frames/op")
	if testing.Verbose() {
		last := log.pages[max(len(start.pages), len(log.pages)-500):]
		b.Logf("pages of the last %d frames by table or index: %s", len(last), pagesByTree(b, st, last))
	}
}

// oneProducerWrite stores a new job and leases it, and starts and succeeds prev (nil: none),
// returning the leased job.
func oneProducerWrite(tx store.Tx, prev *job.Job, now time.Time) (*job.Job, error) {
	if _, err := tx.JobInsertMany([]*store.JobInsertParams{{Type: "noop", Queue: "default",
		Payload: []byte(`{"n":1}`), MaxAttempts: 3, RunAt: now, Now: now}}); err != nil {
		return nil, err
	}
	if prev != nil {
		ref := job.LeaseRef{JobID: prev.ID, Token: prev.LeaseToken}
		ok, err := tx.JobStart(&store.JobStartParams{Ref: ref, Attempt: 1, Now: now,
			LeaseUntil: now.Add(time.Minute), AttemptDeadline: now.Add(time.Minute)})
		if err == nil && !ok {
			err = fmt.Errorf("job %d: start refused", prev.ID)
		}
		if err != nil {
			return nil, err
		}
		applied, err := tx.JobSucceedMany([]*store.JobFinishParams{{Ref: ref, Queue: "default", Type: "noop",
			State: job.StateSucceeded, Now: now, Attempt: job.Attempt{Number: 1, WorkerID: "w",
				StartedAt: now, FinishedAt: now, Outcome: job.OutcomeSucceeded}}})
		if err == nil && !applied[0] {
			err = fmt.Errorf("job %d: success refused", prev.ID)
		}
		if err != nil {
			return nil, err
		}
	}
	jobs, err := tx.JobLease(&store.JobLeaseParams{Types: []string{"noop"}, Limit: 1, WorkerID: "w",
		Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil {
		return nil, err
	}
	if len(jobs) != 1 {
		return nil, fmt.Errorf("leased %d jobs, want 1", len(jobs))
	}
	return jobs[0], nil
}

// stopCheckpoints stops st's background checkpoints and the writer's own (the backstop,
// walBackstopPages), so that the log only grows and never rewinds: every frame a write adds
// stays in it to be counted (readLog).
func stopCheckpoints(ctx context.Context, b *testing.B, st *Store) {
	b.Helper()
	close(st.stopCheckpoints)
	<-st.checkpointsDone
	// Close stops the checkpointer again: give it channels it can close and wait on.
	st.stopCheckpoints, st.checkpointsDone = make(chan struct{}), make(chan struct{})
	close(st.checkpointsDone)
	st.writeMu.Lock()
	defer st.writeMu.Unlock()
	if _, err := st.wc.ExecContext(ctx, `PRAGMA wal_autocheckpoint = 0`); err != nil {
		b.Fatal(err)
	}
}

// walLog is what a -wal file holds: the page number of each of its frames, in order.
type walLog struct{ pages []uint32 }

// readLog reads the frames of the log beside the database at path: those after its header
// that carry the header's salts (a rewound log keeps older frames behind the new ones, with
// the salts of before).
func readLog(b *testing.B, path string) walLog {
	b.Helper()
	wal, err := os.ReadFile(path + "-wal")
	if err != nil {
		b.Fatal(err)
	}
	const header, frameHeader = 32, 24
	if len(wal) < header {
		return walLog{}
	}
	pageSize := int(binary.BigEndian.Uint32(wal[8:]))
	salts := wal[16:24]
	var log walLog
	for off := header; off+frameHeader+pageSize <= len(wal); off += frameHeader + pageSize {
		if string(wal[off+8:off+16]) != string(salts) {
			break
		}
		log.pages = append(log.pages, binary.BigEndian.Uint32(wal[off:]))
	}
	return log
}

// pagesByTree counts pages by the table or index they belong to (SQLite's dbstat).
func pagesByTree(b *testing.B, st *Store, pages []uint32) string {
	b.Helper()
	owner := map[uint32]string{}
	rows, err := st.r.Query(`SELECT name, pageno FROM dbstat`)
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var name string
		var page uint32
		if err := rows.Scan(&name, &page); err != nil {
			b.Fatal(err)
		}
		owner[page] = name
	}
	if err := rows.Close(); err != nil {
		b.Fatal(err)
	}
	counts := map[string]int{}
	for _, page := range pages {
		counts[owner[page]]++
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		out = append(out, fmt.Sprintf("%s %d", name, counts[name]))
	}
	return strings.Join(out, ", ")
}
