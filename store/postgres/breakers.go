package postgres

import (
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// breakerLockSQL reads and locks one type's breaker.
const breakerLockSQL = `SELECT data FROM breakers WHERE type = $1 FOR UPDATE`

// breakerSaveSQL stores one type's breaker.
const breakerSaveSQL = `INSERT INTO breakers (type, data, shut) VALUES ($1, $2, $3)
	ON CONFLICT (type) DO UPDATE SET data = excluded.data, shut = excluded.shut`

// BreakerSave stores r, with the transaction's next statement that is waited for or with
// COMMIT (hold): nothing reads its answer, and in a group commit that counts successes in
// their breaker it was a round trip of its own between the breaker's lock and COMMIT.
func (t *tx) BreakerSave(r store.BreakerRecord) error {
	if err := t.flushFinished(); err != nil { // the totals' rows come before the breakers'
		return err
	}
	defer t.frontSafe()() // one that reopens the breaker is counted by reopening
	if err := t.reopening(r); err != nil {
		return err
	}
	return t.hold(breakerSaveSQL, r.Type, r.Data, r.Shut)
}

// breakerWasShutSQL reads whether a breaker is shut, locking its row for the save that follows.
const breakerWasShutSQL = `SELECT shut FROM breakers WHERE type = $1 FOR UPDATE`

// reopening reads, with the transaction's next waited statement or COMMIT, whether saving r
// takes a shut breaker out of shut, and until the answer says not, counts the write as one
// that made jobs ready (unread; a connection lost during COMMIT leaves it unread): a
// lease that leaves out the shut types (JobLeaseParams.ExcludeShut) may have moved a front past
// the type's ready jobs while it was shut (front.go). Any other save of a breaker cannot make
// a job ready: one that leaves a breaker as it was, or shuts it, holds jobs back if anything.
// So the saves that count a drain's successes in a breaker that stays CLOSED, about one a
// second, keep the fronts. Its read, like the save, runs inside the save's frontSafe.
func (t *tx) reopening(r store.BreakerRecord) error {
	if r.Shut {
		return nil
	}
	read := func(rows pgx.Rows) (bool, error) {
		shut, err := pgx.CollectRows(rows, pgx.RowTo[bool])
		return slices.Contains(shut, true), err
	}
	t.unread++
	return runRows(t, true, breakerWasShutSQL, []any{r.Type}, read, func(shut bool, err error) {
		if !shut && err == nil {
			t.unread--
		}
	})
}

// breakerSaveIfSQL stores one type's breaker if it is stored as seen and the successes it
// counts are stored (migration 021).
const breakerSaveIfSQL = `SELECT jobwire_breaker_save_if($1, $2, $3, $4, $5, $6)`

// BreakerSaveIf stores r if the type's row holds stored and the jobs of succeeded are
// SUCCEEDED under those leases, with the transaction's next statement that is waited for or
// with COMMIT (hold); otherwise it fails the transaction with 40001, a serialization failure,
// which Classify calls transient.
func (t *tx) BreakerSaveIf(r store.BreakerRecord, stored []byte, succeeded []job.LeaseRef) error {
	if err := t.flushFinished(); err != nil { // the totals' rows come before the breakers'
		return err
	}
	defer t.frontSafe()() // one that reopens the breaker is counted by reopening
	if err := t.reopening(r); err != nil {
		return err
	}
	ids, seqs := make([]int64, len(succeeded)), make([]int64, len(succeeded))
	for i, ref := range succeeded {
		ids[i], seqs[i] = ref.JobID, ref.Token.Seq
	}
	return t.hold(breakerSaveIfSQL, r.Type, r.Data, r.Shut, stored, ids, seqs)
}

// BreakerLock locks the type's row. A row that does not exist cannot be locked, so a missing
// one is inserted first; two brokers inserting at once agree on one row, since the second
// insert waits for the first and then does nothing.
func (t *tx) BreakerLock(typ string, initial []byte) ([]byte, error) {
	if err := t.flushFinished(); err != nil { // the totals' rows come before the breakers'
		return nil, err
	}
	for range 2 {
		var data []byte
		err := t.tx.QueryRow(t.ctx, breakerLockSQL, typ).Scan(&data)
		if !errors.Is(err, pgx.ErrNoRows) {
			return data, err
		}
		if _, err := t.exec(`INSERT INTO breakers (type, data) VALUES ($1, $2) ON CONFLICT (type) DO NOTHING`,
			typ, initial); err != nil {
			return nil, err
		}
	}
	return nil, errors.New("breaker row of type " + typ + " vanished while being locked")
}

func (t *tx) BreakerGet(types []string) ([]store.BreakerRecord, error) {
	return scanBreakers(t.tx.Query(t.ctx, `SELECT type, data, shut FROM breakers WHERE type = ANY($1) ORDER BY type`, types))
}

// breakerShutSQL reads every shut breaker, whatever its type: the asked types are picked out
// after. With no parameter, the server plans it once per connection; with the types as one
// (type = ANY($1)) it planned the statement afresh on every call, since the plan it keeps for any
// array looked dearer than one made for the array at hand, and planning cost ten times the read.
const breakerShutSQL = `SELECT type, data, shut FROM breakers WHERE shut ORDER BY type`

// BreakerShutAtCommit sends its read with COMMIT (runRows).
func (t *tx) BreakerShutAtCommit(types []string, got func([]store.BreakerRecord, error)) error {
	defer t.frontSafe()() // a read
	read := func(rows pgx.Rows) ([]store.BreakerRecord, error) {
		shut, err := scanBreakers(rows, nil)
		return slices.DeleteFunc(shut, func(r store.BreakerRecord) bool { return !slices.Contains(types, r.Type) }), err
	}
	return runRows(t, true, breakerShutSQL, nil, read, got)
}

// scanBreakers reads breaker records (type, data, shut).
func scanBreakers(rows pgx.Rows, err error) ([]store.BreakerRecord, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.BreakerRecord, error) {
		var r store.BreakerRecord
		err := row.Scan(&r.Type, &r.Data, &r.Shut)
		return r, err
	})
}
