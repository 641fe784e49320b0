package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/store"
)

// This file holds the audit trail: one row per operator action, written in the action's own
// transaction by whichever broker did it, read by `jobwire audit list` and the dashboard.

const auditColumns = `id, at, action, actor_id, actor_name, source, peer, broker_id, target, detail, count, job_ids`

func scanAudit(row pgx.Row) (store.AuditEvent, error) {
	var (
		e  store.AuditEvent
		at int64
	)
	if err := row.Scan(&e.ID, &at, &e.Action, &e.ActorID, &e.ActorName, &e.Source, &e.Peer, &e.BrokerID,
		&e.Target, &e.Detail, &e.Count, &e.JobIDs); err != nil {
		return e, err
	}
	if e.JobIDs == nil {
		e.JobIDs = []int64{}
	}
	e.At = fromNanos(at)
	return e, nil
}

// AuditList reads the audit events p matches, newest first.
func (s *Store) AuditList(ctx context.Context, p *store.AuditListParams) ([]store.AuditEvent, error) {
	var q query
	q.sql.WriteString(`SELECT ` + auditColumns + ` FROM audit_events WHERE true`)
	p.Conds(func(cond string, v any) {
		if cond == "actor" {
			n := q.arg(v)
			q.sql.WriteString(" AND (actor_id = " + n + " OR actor_name = " + n + ")")
			return
		}
		q.sql.WriteString(" AND " + cond + " " + q.arg(v))
	})
	q.sql.WriteString(` ORDER BY id DESC LIMIT ` + q.arg(p.Limit))
	var out []store.AuditEvent
	err := s.read(ctx, "audit_list", func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, q.sql.String(), q.args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			e, err := scanAudit(rows)
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		return rows.Err()
	})
	return out, err
}

// AuditInsert stores an audit event and sets its id.
func (t *tx) AuditInsert(e *store.AuditEvent) error {
	ids := e.JobIDs[:min(len(e.JobIDs), store.MaxAuditJobIDs)]
	if ids == nil {
		ids = []int64{}
	}
	return t.tx.QueryRow(t.ctx, `INSERT INTO audit_events (at, action, actor_id, actor_name, source, peer,
		broker_id, target, detail, count, job_ids) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
		RETURNING id`, nanos(e.At), e.Action, e.ActorID, e.ActorName, e.Source, e.Peer, e.BrokerID, e.Target,
		e.Detail, e.Count, ids).Scan(&e.ID)
}

// AuditAddCount adds n to an event's count.
func (t *tx) AuditAddCount(id int64, n int64) error {
	changed, err := t.exec(`UPDATE audit_events SET count = count + $1 WHERE id = $2`, n, id)
	if err == nil && changed == 0 {
		return fmt.Errorf("audit event %d: %w", id, store.ErrNotFound)
	}
	return err
}

// AuditDeleteBefore deletes up to limit events stored before before, oldest first.
func (t *tx) AuditDeleteBefore(before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	n, err := t.exec(`DELETE FROM audit_events WHERE id IN (SELECT id FROM audit_events WHERE at < $1
		ORDER BY at LIMIT $2)`, nanos(before), limit)
	return int(n), err
}
