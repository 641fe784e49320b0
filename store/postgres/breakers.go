package postgres

import (
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/store"
)

// BreakerLock locks the type's row. A row that does not exist cannot be locked, so a missing
// one is inserted first; two brokers inserting at once agree on one row, since the second
// insert waits for the first and then does nothing.
func (t *tx) BreakerLock(typ string, initial []byte) ([]byte, error) {
	for range 2 {
		var data []byte
		err := t.tx.QueryRow(t.ctx, `SELECT data FROM breakers WHERE type = $1 FOR UPDATE`, typ).Scan(&data)
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

const breakerGetSQL = `SELECT type, data FROM breakers WHERE type = ANY($1) ORDER BY type`

func (t *tx) BreakerGet(types []string) ([]store.BreakerRecord, error) {
	return scanBreakers(t.tx.Query(t.ctx, breakerGetSQL, types))
}

// LeaseGuard reads the breakers and counts the capped queues' room (queueRoom) in one batch:
// one round trip where a lease round took two.
func (t *tx) LeaseGuard(types []string) ([]store.BreakerRecord, error) {
	if t.room != nil {
		return t.BreakerGet(types)
	}
	batch := &pgx.Batch{}
	batch.Queue(breakerGetSQL, types)
	queueRoomBatch(batch)
	res := t.tx.SendBatch(t.ctx, batch)
	defer res.Close()
	recs, err := scanBreakers(res.Query())
	if err != nil {
		return nil, err
	}
	if t.room, err = readQueueRoom(res); err != nil {
		return nil, err
	}
	return recs, nil
}

// scanBreakers reads breaker records (type, data).
func scanBreakers(rows pgx.Rows, err error) ([]store.BreakerRecord, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.BreakerRecord, error) {
		var r store.BreakerRecord
		err := row.Scan(&r.Type, &r.Data)
		return r, err
	})
}
