package server

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// validateAdmin checks the admin service's requests; requests without rules pass.
func (s *Server) validateAdmin(req any, now time.Time) error {
	switch r := req.(type) {
	case *jobwirev1.ListJobsRequest:
		if st := r.GetState(); st != jobwirev1.JobState_JOB_STATE_UNSPECIFIED {
			if _, ok := jobwirev1.JobState_name[int32(st)]; !ok {
				return invalid("state", "is not a job state: %d", st)
			}
		}
		if err := optionalName("queue", r.GetQueue()); err != nil {
			return err
		}
		if err := optionalName("type", r.GetType()); err != nil {
			return err
		}
		if err := validPageSize(r.GetPageSize()); err != nil {
			return err
		}
		order, err := listOrder(r.GetSort(), r.GetAscending(), broker.JobSortColumns())
		if err != nil {
			return err
		}
		_, err = decodeListToken(r.GetPageToken(), order)
		return err
	case *jobwirev1.ListDeadJobsRequest:
		if err := validFilter("filter", r.GetFilter()); err != nil {
			return err
		}
		if err := validPageSize(r.GetPageSize()); err != nil {
			return err
		}
		order, err := listOrder(r.GetSort(), r.GetAscending(), broker.DeadSortColumns())
		if err != nil {
			return err
		}
		_, err = decodeListToken(r.GetPageToken(), order)
		return err
	case *jobwirev1.RequeueDeadJobsRequest:
		sel := r.GetSelection()
		if err := validSelection(sel); err != nil {
			return err
		}
		if r.Priority != nil {
			if p := r.GetPriority(); p < minPriority || p > maxPriority {
				return invalid("priority", "must be %d..%d, got %d", minPriority, maxPriority, p)
			}
		}
		if r.Payload != nil {
			if sel.GetFilter() != nil || len(sel.GetIds()) != 1 {
				return invalid("payload", "a corrected payload needs exactly one job selected by id, got %d ids", len(sel.GetIds()))
			}
			if n := len(r.GetPayload()); n > s.limits.MaxPayload {
				return invalid("payload", "is %d bytes, more than the limit of %d", n, s.limits.MaxPayload)
			}
		}
		if at := r.GetRunAt(); at != nil {
			if err := at.CheckValid(); err != nil {
				return invalid("run_at", "is not a valid time: %v", err)
			}
			if at.AsTime().After(now.Add(s.limits.MaxScheduleAhead)) {
				return invalid("run_at", "is more than %s ahead", s.limits.MaxScheduleAhead)
			}
		}
	case *jobwirev1.PurgeDeadJobsRequest:
		return validSelection(r.GetSelection())
	case *jobwirev1.TopDeadErrorsRequest:
		if err := validFilter("filter", r.GetFilter()); err != nil {
			return err
		}
		if n := r.GetLimit(); n < 0 || n > maxErrorLimit {
			return invalid("limit", "must be 0 (the default, %d) or 1..%d, got %d", defaultErrorLimit, maxErrorLimit, n)
		}
	case *jobwirev1.PurgeFinishedJobsRequest:
		d := r.GetOlderThan()
		if d == nil {
			return invalid("older_than", "is required")
		}
		if err := d.CheckValid(); err != nil {
			return invalid("older_than", "is not a valid duration: %v", err)
		}
		if d.AsDuration() < 0 {
			return invalid("older_than", "must not be negative, got %s", d.AsDuration())
		}
	case *jobwirev1.ListAuditEventsRequest:
		return validAuditRequest(r)
	case *jobwirev1.PauseQueueRequest:
		return validName("queue", r.GetQueue())
	case *jobwirev1.ResumeQueueRequest:
		return validName("queue", r.GetQueue())
	case *jobwirev1.SetConcurrencyRuleRequest:
		return validConcurrencyRule(r.GetRule())
	case *jobwirev1.RemoveConcurrencyRuleRequest:
		if r.GetName() == "" {
			return invalid("name", "must name a concurrency rule")
		}
	case *jobwirev1.SetRateLimitRequest:
		return validRateLimit(r.GetLimit())
	case *jobwirev1.RemoveRateLimitRequest:
		return validName("name", r.GetName())
	case *jobwirev1.SetQueueLimitRequest:
		if err := validName("queue", r.GetQueue()); err != nil {
			return err
		}
		if n := r.GetLimit(); n < 0 || n > maxQueueLimit {
			return invalid("limit", "must be 0 (no cap) or 1..%d, got %d", maxQueueLimit, n)
		}
	}
	return nil
}

func optionalName(field, s string) error {
	if s == "" {
		return nil
	}
	return validName(field, s)
}

func validPageSize(n int32) error {
	if n < 0 || n > maxPageSize {
		return invalid("page_size", "must be 0 (the default, %d) or 1..%d, got %d", defaultPageSize, maxPageSize, n)
	}
	return nil
}

// validFilter checks a dead-job filter; prefix names it ("filter" or "selection.filter").
func validFilter(prefix string, f *jobwirev1.DeadJobFilter) error {
	if f == nil {
		return nil
	}
	if err := optionalName(prefix+".queue", f.GetQueue()); err != nil {
		return err
	}
	if err := optionalName(prefix+".type", f.GetType()); err != nil {
		return err
	}
	if r := f.GetReason(); r != jobwirev1.DeadReason_DEAD_REASON_UNSPECIFIED {
		if _, ok := jobwirev1.DeadReason_name[int32(r)]; !ok {
			return invalid(prefix+".reason", "is not a dead reason: %d", r)
		}
	}
	if n := len(f.GetErrorType()); n > maxNameLen {
		return invalid(prefix+".error_type", "must be at most %d characters, got %d", maxNameLen, n)
	}
	if t := f.GetDeadAfter(); t != nil {
		if err := t.CheckValid(); err != nil {
			return invalid(prefix+".dead_after", "is not a valid time: %v", err)
		}
	}
	if t := f.GetDeadBefore(); t != nil {
		if err := t.CheckValid(); err != nil {
			return invalid(prefix+".dead_before", "is not a valid time: %v", err)
		}
	}
	if f.GetDeadAfter() != nil && f.GetDeadBefore() != nil && !f.GetDeadAfter().AsTime().Before(f.GetDeadBefore().AsTime()) {
		return invalid(prefix+".dead_before", "must be later than dead_after")
	}
	return nil
}

// validSelection checks a bulk selection: ids or a filter, never both, within the limit.
func validSelection(sel *jobwirev1.BulkSelection) error {
	if sel == nil {
		return invalid("selection", "is required")
	}
	limit := sel.GetLimit()
	if limit < 0 || limit > maxBulkLimit {
		return invalid("selection.limit", "must be 0 (the default, %d) or 1..%d, got %d", defaultBulkLimit, maxBulkLimit, limit)
	}
	if limit == 0 {
		limit = defaultBulkLimit
	}
	ids := sel.GetIds()
	emptyFilter := proto.Size(sel.GetFilter()) == 0
	switch {
	case sel.GetAll() && (len(ids) > 0 || !emptyFilter):
		return invalid("selection.all", "selects every dead job: give it without ids or filter")
	case sel.GetAll():
		return nil
	case len(ids) > 0 && sel.GetFilter() != nil:
		return invalid("selection", "give ids or a filter, not both")
	case len(ids) == 0 && sel.GetFilter() == nil:
		return invalid("selection", "give the ids of dead jobs, a filter, or all")
	case len(ids) == 0 && emptyFilter:
		return invalid("selection.filter", "is empty and would select every dead job: set a field, or set all to mean every job")
	case len(ids) > int(limit):
		return invalid("selection.ids", "holds %d ids, more than the limit of %d", len(ids), limit)
	}
	for i, id := range ids {
		if err := validID(fmt.Sprintf("selection.ids[%d]", i), id); err != nil {
			return err
		}
	}
	return validFilter("selection.filter", sel.GetFilter())
}
