package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jobwire/jobwire/store"
)

// This file holds the audit trail: one row per operator action, written in the action's own
// transaction, read by `jobwire audit list` and the dashboard.

const auditColumns = `id, at, action, actor_id, actor_name, source, peer, broker_id, target, detail, count, job_ids`

func scanAudit(sc scanner) (store.AuditEvent, error) {
	var (
		e   store.AuditEvent
		at  int64
		ids string
	)
	if err := sc.Scan(&e.ID, &at, &e.Action, &e.ActorID, &e.ActorName, &e.Source, &e.Peer, &e.BrokerID,
		&e.Target, &e.Detail, &e.Count, &ids); err != nil {
		return e, err
	}
	if err := json.Unmarshal([]byte(ids), &e.JobIDs); err != nil {
		return e, fmt.Errorf("audit event %d: job_ids: %w", e.ID, err)
	}
	e.At = fromNanos(at)
	return e, nil
}

// AuditList reads the audit events p matches, newest first.
func (s *Store) AuditList(ctx context.Context, p *store.AuditListParams) ([]store.AuditEvent, error) {
	var q strings.Builder
	q.WriteString(`SELECT ` + auditColumns + ` FROM audit_events WHERE 1 = 1`)
	var args []any
	p.Conds(func(cond string, v any) {
		if cond == "actor" {
			q.WriteString(" AND (actor_id = ? OR actor_name = ?)")
			args = append(args, v, v)
			return
		}
		q.WriteString(" AND " + cond + " ?")
		args = append(args, v)
	})
	q.WriteString(` ORDER BY id DESC LIMIT ?`)
	args = append(args, p.Limit)
	var out []store.AuditEvent
	err := s.read(ctx, "audit_list", func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.r.QueryContext(ctx, q.String(), args...)
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
	idsJSON, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	return t.queryRow(`INSERT INTO audit_events (at, action, actor_id, actor_name, source, peer, broker_id,
		target, detail, count, job_ids) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		nanos(e.At), e.Action, e.ActorID, e.ActorName, e.Source, e.Peer, e.BrokerID, e.Target, e.Detail,
		e.Count, string(idsJSON)).Scan(&e.ID)
}

// AuditAddCount adds n to an event's count.
func (t *tx) AuditAddCount(id int64, n int64) error {
	changed, err := t.exec(`UPDATE audit_events SET count = count + ? WHERE id = ?`, n, id)
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
	n, err := t.exec(`DELETE FROM audit_events WHERE id IN (SELECT id FROM audit_events WHERE at < ?
		ORDER BY at LIMIT ?)`, nanos(before), limit)
	return int(n), err
}
