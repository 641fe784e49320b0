package sqlite

import (
	"database/sql"
	"errors"
	"slices"
	"strings"

	"github.com/jobwire/jobwire/store"
)

// BreakerLock needs no lock of its own: a write transaction holds the whole file.
func (t *tx) BreakerLock(typ string, initial []byte) ([]byte, error) {
	var data []byte
	err := t.queryRow(`SELECT data FROM breakers WHERE type = ?`, typ).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		if _, err := t.exec(`INSERT INTO breakers (type, data) VALUES (?, ?)`, typ, initial); err != nil {
			return nil, err
		}
		return initial, nil
	}
	return data, err
}

// BreakerShutAtCommit reads at once: a statement costs no round trip here.
func (t *tx) BreakerShutAtCommit(types []string, got func([]store.BreakerRecord, error)) error {
	recs, err := t.BreakerGet(types)
	if err != nil {
		return err
	}
	got(slices.DeleteFunc(recs, func(r store.BreakerRecord) bool { return !r.Shut }), nil)
	return nil
}

func (t *tx) BreakerGet(types []string) ([]store.BreakerRecord, error) {
	if len(types) == 0 {
		return nil, nil
	}
	var q strings.Builder
	q.WriteString(`SELECT type, data, shut FROM breakers WHERE 1`)
	args := in(&q, nil, "type", false, types)
	q.WriteString(` ORDER BY type`)
	rows, err := t.query(q.String(), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.BreakerRecord
	for rows.Next() {
		var r store.BreakerRecord
		if err := rows.Scan(&r.Type, &r.Data, &r.Shut); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
