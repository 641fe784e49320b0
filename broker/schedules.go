package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/internal/service"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/schedule"
	"github.com/jobwire/jobwire/store"
)

// This file runs the periodic schedules: the scheduler service fires them on the leader, and
// the broker's methods let operators declare, pause, trigger and backfill them.
//
// Each occurrence is enqueued exactly once. Its identity is its schedule's name and its fire
// time; the write that enqueues its job locks the schedule's row, records the occurrence
// (store.ScheduleTx) and moves the schedule's next fire time past it, all in one transaction.
// A second broker firing the same schedule waits for that row and then finds the next fire
// time moved on; a write run again after an ambiguous commit finds the occurrence recorded.
// Only the leader fires, which keeps brokers from racing, but correctness does not rest on it.

// Metadata keys every occurrence's job carries, so its worker knows which occurrence it runs.
const (
	MetadataSchedule     = "jobwire.schedule"
	MetadataScheduleFire = "jobwire.fire_at"
)

// Bounds of the scheduler's work.
const (
	// scheduleRetry is how soon a run that failed is tried again.
	scheduleRetry = time.Second
	// bufferPoll is how often a schedule with an occurrence kept back (OverlapBufferOne) looks
	// whether the job before it finished.
	bufferPoll = time.Second
	// occurrenceMemory is how long an occurrence stays recorded after its time: a backfill
	// over older times cannot tell it was enqueued.
	occurrenceMemory = 30 * 24 * time.Hour
)

var (
	// ErrScheduleExists: a schedule of that name exists already.
	ErrScheduleExists = errors.New("schedule already exists")
	// ErrInvalidSchedule is matched by the error of a definition or request that cannot work.
	ErrInvalidSchedule = errors.New("invalid schedule")
	// ErrScheduleFromConfig: the schedule is declared in the configuration file, which is
	// its truth; change it there.
	ErrScheduleFromConfig = errors.New("schedule is declared in the configuration file")
)

func invalidSchedule(err error) error { return fmt.Errorf("%w: %w", ErrInvalidSchedule, err) }

// ScheduleInfo is a schedule with where it stands.
type ScheduleInfo struct {
	schedule.Definition
	FromConfig bool
	Paused     bool
	Note       string
	NextFireAt time.Time
	// LastFireAt and LastJobID are the last occurrence enqueued and its job; LastJobState is
	// that job's state now (0 when there is none, or it was deleted).
	LastFireAt   time.Time
	LastJobID    int64
	LastJobState job.State
	// BufferedFireAt is an occurrence kept back until the last one's job finishes.
	BufferedFireAt time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// Backfilled is what a backfill did: the jobs it enqueued, and the occurrences of the range
// that were enqueued before (by the schedule or an earlier backfill).
type Backfilled struct {
	JobIDs   []int64
	Existing int
}

// scheduler fires the periodic schedules on the leader. One alarm is armed for the earliest
// next fire time (or a bufferPoll away while an occurrence is kept back); each run fires what
// is due and arms the alarm again. In a cluster the leader's poll runs it too, so a schedule
// another broker added or resumed fires in time.
type scheduler struct {
	service.Base
	cfg   schedulerConfig
	alarm *service.Alarm

	// uniform draws the jitter from the broker's seeded random source, in [0, 1).
	uniform func() float64

	// Ran is sent how many occurrences each run enqueued (tests).
	Ran service.Signal[int]
}

// schedulerConfig is what the scheduler needs of the broker.
type schedulerConfig struct {
	clk    clock.Clock
	log    *slog.Logger
	leader func() bool
	// fire fires every schedule due at now and returns how many jobs it enqueued and when to
	// look again.
	fire func(now time.Time) (n int, wake time.Time, err error)
}

func newScheduler(cfg schedulerConfig, uniform func() float64) *scheduler {
	s := &scheduler{cfg: cfg, uniform: uniform}
	s.alarm = service.NewAlarm(cfg.clk, func() { s.Do(s.run) })
	s.OnStop(s.alarm.Stop)
	return s
}

// Start starts the scheduler and its alarm, and fires what is due.
func (s *scheduler) Start(ctx context.Context) error {
	if err := s.Base.Start(ctx); err != nil {
		return err
	}
	return s.alarm.Start(ctx)
}

// wake makes sure the scheduler runs by at.
func (s *scheduler) wake(at time.Time) { s.alarm.SetEarlier(at) }

// runNow fires what is due now and waits for it: on the cluster's poll.
func (s *scheduler) runNow() { s.Do(s.run) }

// jitter draws a delay in [0, max).
func (s *scheduler) jitter(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return time.Duration(s.uniform() * float64(max))
}

func (s *scheduler) run() {
	if !s.cfg.leader() {
		return
	}
	n, wake, err := s.cfg.fire(s.cfg.clk.Now())
	switch {
	case stopping(err):
	case err != nil:
		s.cfg.log.Error("fire periodic schedules", "err", err)
		s.wake(s.cfg.clk.Now().Add(scheduleRetry))
	case !wake.IsZero():
		// Only ever earlier: a schedule added while this run read the list armed the alarm
		// for its own time, which this run's answer may not know.
		s.wake(wake)
	}
	s.Ran.Send(n)
}

// RunSchedules fires every schedule due now and returns once what it enqueued is stored. It
// does so on any broker, leader or not: two brokers firing one schedule at once enqueue each
// occurrence once all the same (the scheduler service runs it on the leader only, so that they
// seldom have to wait for each other).
func (b *Broker) RunSchedules() {
	if _, _, err := b.fireSchedules(b.now()); err != nil && !stopping(err) {
		b.log.Error("fire periodic schedules", "err", err)
	}
}

// fireSchedules fires every schedule due at now and returns how many jobs it enqueued and when
// the next is due.
func (b *Broker) fireSchedules(now time.Time) (int, time.Time, error) {
	recs, err := b.st.ScheduleList(b.ctx)
	if err != nil {
		return 0, time.Time{}, err
	}
	var wake time.Time
	earlier := func(t time.Time) {
		if wake.IsZero() || t.Before(wake) {
			wake = t
		}
	}
	total := 0
	for i := range recs {
		r := &recs[i]
		if r.Paused {
			continue
		}
		if r.NextFireAt.After(now) && (r.BufferedFireAt.IsZero() || b.jobRunning(r.LastJobID)) {
			earlier(r.NextFireAt)
			if !r.BufferedFireAt.IsZero() {
				earlier(now.Add(bufferPoll))
			}
			continue
		}
		n, after, err := b.fireSchedule(r, now)
		if err != nil {
			return total, wake, fmt.Errorf("schedule %q: %w", r.Name, err)
		}
		total += n
		earlier(after.NextFireAt)
		if !after.BufferedFireAt.IsZero() {
			earlier(now.Add(bufferPoll))
		}
	}
	return total, wake, nil
}

// jobRunning reports whether job id exists and has not finished.
func (b *Broker) jobRunning(id int64) bool {
	if id == 0 {
		return false
	}
	j, err := b.st.JobGet(b.ctx, id)
	return err == nil && !j.State.Final()
}

// fireSchedule fires one schedule due at now: it cancels the previous occurrence's job first
// when the overlap policy says so, then enqueues the occurrences the decision names, in one
// write that decides again under the schedule's lock.
func (b *Broker) fireSchedule(r *store.ScheduleRecord, now time.Time) (int, *store.ScheduleRecord, error) {
	def, tt, err := decodeSchedule(r)
	if err != nil {
		return 0, nil, err
	}
	state := schedule.State{Next: r.NextFireAt, Buffered: r.BufferedFireAt, PreviousRunning: b.jobRunning(r.LastJobID)}
	if schedule.Decide(def, tt, state, now).CancelPrevious {
		_, err := b.Cancel(b.ctx, r.LastJobID)
		if err != nil && !errors.Is(err, ErrFinished) && !errors.Is(err, ErrNotFound) {
			return 0, nil, fmt.Errorf("cancel the previous occurrence's job %d: %w", r.LastJobID, err)
		}
	}
	var fired []occurrence
	var after *store.ScheduleRecord
	err = b.do(b.ctx, "schedule.fire", func(tx store.Tx) error {
		fired, after = nil, nil
		cur, err := tx.ScheduleLock(r.Name)
		if errors.Is(err, store.ErrNotFound) {
			return nil // removed meanwhile
		}
		if err != nil || cur.Paused {
			return err
		}
		fired, err = b.fireLocked(tx, cur, now)
		after = cur
		return err
	})
	if err != nil || after == nil {
		return 0, r, err
	}
	b.occurrencesStored(fired)
	return len(fired), after, nil
}

// fireLocked decides what the locked schedule r does at now, enqueues it and stores where the
// schedule stands.
func (b *Broker) fireLocked(tx store.Tx, r *store.ScheduleRecord, now time.Time) ([]occurrence, error) {
	def, tt, err := decodeSchedule(r)
	if err != nil {
		return nil, err
	}
	running := false
	if r.LastJobID != 0 {
		states, err := tx.JobStates([]int64{r.LastJobID})
		if err != nil {
			return nil, err
		}
		st, ok := states[r.LastJobID]
		running = ok && !st.Final()
	}
	d := schedule.Decide(def, tt, schedule.State{Next: r.NextFireAt, Buffered: r.BufferedFireAt, PreviousRunning: running}, now)
	var fired []occurrence
	for _, at := range d.Fire {
		o, err := b.enqueueOccurrence(tx, def, at, now)
		if err != nil {
			return nil, err
		}
		if o.added {
			fired = append(fired, o)
		}
		r.LastFireAt, r.LastJobID = at, o.id
	}
	if d.Missed > 0 || d.Skipped > 0 {
		b.log.Info("schedule passed occurrences over", "schedule", def.Name, "missed", d.Missed, "skipped_overlap", d.Skipped)
	}
	r.NextFireAt, r.BufferedFireAt, r.UpdatedAt = d.Next, d.Buffered, now
	if err := tx.ScheduleOccurrenceDeleteBefore(r.Name, now.Add(-occurrenceMemory)); err != nil {
		return nil, err
	}
	return fired, tx.ScheduleSave(r)
}

// occurrence is an occurrence's job: enqueued by this write (added) or found recorded.
type occurrence struct {
	id    int64
	added bool
	queue string
	typ   string
	runAt time.Time
	ready bool
}

// errOccurrenceRecorded fails a write that found its occurrence recorded by another as it
// recorded it: the write's job must not stay. Run again, it finds the occurrence and adds none.
var errOccurrenceRecorded = errors.New("occurrence recorded by another write meanwhile")

// enqueueOccurrence enqueues the job of def's occurrence at, unless it is recorded already,
// and records it.
func (b *Broker) enqueueOccurrence(tx store.Tx, def *schedule.Definition, at, now time.Time) (occurrence, error) {
	if id, ok, err := tx.ScheduleOccurrenceGet(def.Name, at); err != nil || ok {
		return occurrence{id: id}, err
	}
	o, err := b.insertOccurrenceJob(tx, def, at, now)
	if err != nil {
		return occurrence{}, err
	}
	added, err := tx.ScheduleOccurrenceAdd(def.Name, at, o.id)
	if err != nil {
		return occurrence{}, err
	}
	if !added {
		return occurrence{}, errOccurrenceRecorded
	}
	return o, nil
}

// insertOccurrenceJob inserts the job of def's occurrence at.
func (b *Broker) insertOccurrenceJob(tx store.Tx, def *schedule.Definition, at, now time.Time) (occurrence, error) {
	meta := maps.Clone(def.Metadata)
	if meta == nil {
		meta = make(map[string]string, 2)
	}
	meta[MetadataSchedule], meta[MetadataScheduleFire] = def.Name, FormatFireTime(at)
	spec := JobSpec{Type: def.Type, Queue: def.Queue, Payload: def.Payload, Priority: def.Priority,
		RunAt: at.Add(b.svc.schedules.jitter(def.Jitter)), MaxAttempts: def.MaxAttempts,
		AttemptTimeout: def.AttemptTimeout, Metadata: meta}.withDefaults(b.cfg, now)
	rs, err := tx.JobInsertMany([]*store.JobInsertParams{spec.insertParams(now)})
	if err != nil {
		return occurrence{}, err
	}
	o := occurrence{id: rs[0].ID, added: true, queue: spec.Queue, typ: spec.Type, runAt: spec.RunAt, ready: !spec.RunAt.After(now)}
	if o.ready {
		tx.Publish(readyEvent)
	} else {
		tx.Publish(scheduledEvent(o.runAt))
	}
	return o, nil
}

// occurrencesStored tells the rest of the broker of the jobs a committed write enqueued.
func (b *Broker) occurrencesStored(fired []occurrence) {
	ready := false
	for _, o := range fired {
		b.obs.JobEnqueued(o.queue, o.typ)
		if o.ready {
			ready = true
		} else {
			b.schedule(o.runAt)
		}
	}
	if ready {
		b.signal()
	}
}

func decodeSchedule(r *store.ScheduleRecord) (*schedule.Definition, *schedule.Timetable, error) {
	def, err := schedule.Decode(r.Spec)
	if err != nil {
		return nil, nil, err
	}
	def.Name = r.Name
	tt, err := def.Validate()
	if err != nil {
		return nil, nil, err
	}
	return def, tt, nil
}

// ListSchedules reads every schedule, by name, with its last occurrence's job state.
func (b *Broker) ListSchedules(ctx context.Context) ([]ScheduleInfo, error) {
	recs, err := b.st.ScheduleList(ctx)
	if err != nil {
		return nil, err
	}
	return b.scheduleInfos(ctx, recs)
}

// GetSchedule reads one schedule.
func (b *Broker) GetSchedule(ctx context.Context, name string) (*ScheduleInfo, error) {
	r, err := b.st.ScheduleGet(ctx, name)
	if err != nil {
		return nil, err
	}
	infos, err := b.scheduleInfos(ctx, []store.ScheduleRecord{*r})
	if err != nil {
		return nil, err
	}
	return &infos[0], nil
}

func (b *Broker) scheduleInfos(ctx context.Context, recs []store.ScheduleRecord) ([]ScheduleInfo, error) {
	var ids []int64
	for _, r := range recs {
		if r.LastJobID != 0 {
			ids = append(ids, r.LastJobID)
		}
	}
	jobs, err := b.st.JobGetMany(ctx, ids)
	if err != nil {
		return nil, err
	}
	states := make(map[int64]job.State, len(jobs))
	for _, j := range jobs {
		states[j.ID] = j.State
	}
	out := make([]ScheduleInfo, 0, len(recs))
	for _, r := range recs {
		def, err := schedule.Decode(r.Spec)
		if err != nil {
			return nil, err
		}
		def.Name = r.Name
		out = append(out, ScheduleInfo{Definition: *def, FromConfig: r.FromConfig, Paused: r.Paused, Note: r.Note,
			NextFireAt: r.NextFireAt, LastFireAt: r.LastFireAt, LastJobID: r.LastJobID, LastJobState: states[r.LastJobID],
			BufferedFireAt: r.BufferedFireAt, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt})
	}
	return out, nil
}

// The audit actions of schedules.
const (
	AuditScheduleAdd      = "schedule.add"
	AuditScheduleUpdate   = "schedule.update"
	AuditScheduleRemove   = "schedule.remove"
	AuditSchedulePause    = "schedule.pause"
	AuditScheduleResume   = "schedule.resume"
	AuditScheduleTrigger  = "schedule.trigger"
	AuditScheduleBackfill = "schedule.backfill"
)

// AddSchedule declares a new schedule; its first occurrence is the first fire time after now.
func (b *Broker) AddSchedule(ctx context.Context, def schedule.Definition) (*ScheduleInfo, error) {
	return b.putSchedule(ctx, def, false)
}

// UpdateSchedule replaces a schedule's definition. A schedule whose times changed (its cron
// expression or time zone) fires next at the first new time after now; otherwise it keeps its
// next fire time. Where it stands (paused, its last occurrence) is kept.
func (b *Broker) UpdateSchedule(ctx context.Context, def schedule.Definition) (*ScheduleInfo, error) {
	return b.putSchedule(ctx, def, true)
}

func (b *Broker) putSchedule(ctx context.Context, def schedule.Definition, update bool) (*ScheduleInfo, error) {
	tt, err := def.Validate()
	if err != nil {
		return nil, invalidSchedule(err)
	}
	spec, err := def.Encode()
	if err != nil {
		return nil, err
	}
	now := b.now()
	var next time.Time
	err = b.do(ctx, "schedule.put", func(tx store.Tx) error {
		cur, err := tx.ScheduleLock(def.Name)
		switch {
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return err
		case err == nil && !update:
			return fmt.Errorf("schedule %q: %w; update it, or remove it first", def.Name, ErrScheduleExists)
		case err != nil && update:
			return err
		case err == nil && cur.FromConfig:
			return fmt.Errorf("schedule %q: %w; change it there", def.Name, ErrScheduleFromConfig)
		}
		r := replaceSpec(cur, &def, spec, tt, now)
		next = r.NextFireAt
		action := AuditScheduleAdd
		if update {
			action = AuditScheduleUpdate
		}
		if err := tx.ScheduleSave(r); err != nil {
			return err
		}
		return b.audit(ctx, tx, &store.AuditEvent{Action: action, Target: def.Name, Detail: def.Cron})
	})
	if err != nil {
		return nil, err
	}
	b.svc.schedules.wake(next)
	return b.GetSchedule(ctx, def.Name)
}

// replaceSpec is cur (nil: a new schedule) with the definition spec: its next fire time moves
// to the first of its times after now when those times changed.
func replaceSpec(cur *store.ScheduleRecord, def *schedule.Definition, spec []byte, tt *schedule.Timetable, now time.Time) *store.ScheduleRecord {
	if cur == nil {
		return &store.ScheduleRecord{Name: def.Name, Spec: spec, NextFireAt: tt.Next(now), CreatedAt: now, UpdatedAt: now}
	}
	r := *cur
	old, err := schedule.Decode(cur.Spec)
	if err != nil || old.Cron != def.Cron || old.TimeZone != def.TimeZone {
		r.NextFireAt, r.BufferedFireAt = tt.Next(now), time.Time{}
	}
	r.Spec, r.UpdatedAt = spec, now
	return &r
}

// RemoveSchedule deletes a schedule; jobs it enqueued stay.
func (b *Broker) RemoveSchedule(ctx context.Context, name string) error {
	return b.do(ctx, "schedule.remove", func(tx store.Tx) error {
		cur, err := tx.ScheduleLock(name)
		if err != nil {
			return err
		}
		if cur.FromConfig {
			return fmt.Errorf("schedule %q: %w; remove it there", name, ErrScheduleFromConfig)
		}
		if _, err := tx.ScheduleDelete(name); err != nil {
			return err
		}
		return b.audit(ctx, tx, &store.AuditEvent{Action: AuditScheduleRemove, Target: name})
	})
}

// PauseSchedule stops a schedule from firing, with a note saying why. Occurrences while it is
// paused are skipped.
func (b *Broker) PauseSchedule(ctx context.Context, name, note string) (*ScheduleInfo, error) {
	return b.setSchedulePaused(ctx, name, true, note)
}

// ResumeSchedule makes a paused schedule fire again, from its first fire time after now.
func (b *Broker) ResumeSchedule(ctx context.Context, name string) (*ScheduleInfo, error) {
	return b.setSchedulePaused(ctx, name, false, "")
}

func (b *Broker) setSchedulePaused(ctx context.Context, name string, paused bool, note string) (*ScheduleInfo, error) {
	now := b.now()
	var next time.Time
	err := b.do(ctx, "schedule.pause", func(tx store.Tx) error {
		r, err := tx.ScheduleLock(name)
		if err != nil {
			return err
		}
		action := AuditSchedulePause
		if !paused {
			action = AuditScheduleResume
			if r.Paused {
				_, tt, err := decodeSchedule(r)
				if err != nil {
					return err
				}
				r.NextFireAt, r.BufferedFireAt = tt.Next(now), time.Time{}
			}
		}
		r.Paused, r.Note, r.UpdatedAt = paused, note, now
		next = r.NextFireAt
		if err := tx.ScheduleSave(r); err != nil {
			return err
		}
		return b.audit(ctx, tx, &store.AuditEvent{Action: action, Target: name, Detail: note})
	})
	if err != nil {
		return nil, err
	}
	if !paused {
		b.svc.schedules.wake(next)
	}
	return b.GetSchedule(ctx, name)
}

// TriggerSchedule enqueues an occurrence now, whatever the schedule's times, overlap policy or
// pause: an operator asked for it, as for an enqueue, and each trigger enqueues a job (it is
// not one of the schedule's occurrences, which stay due at their times). It becomes the
// schedule's last occurrence.
func (b *Broker) TriggerSchedule(ctx context.Context, name string) (Enqueued, error) {
	now := b.now()
	var o occurrence
	err := b.do(ctx, "schedule.trigger", func(tx store.Tx) error {
		r, err := tx.ScheduleLock(name)
		if err != nil {
			return err
		}
		def, _, err := decodeSchedule(r)
		if err != nil {
			return err
		}
		if o, err = b.insertOccurrenceJob(tx, def, now, now); err != nil {
			return err
		}
		r.LastFireAt, r.LastJobID, r.UpdatedAt = now, o.id, now
		if err := tx.ScheduleSave(r); err != nil {
			return err
		}
		return b.audit(ctx, tx, &store.AuditEvent{Action: AuditScheduleTrigger, Target: name, Count: 1, JobIDs: []int64{o.id}})
	})
	if err != nil {
		return Enqueued{}, err
	}
	b.occurrencesStored([]occurrence{o})
	state := job.StatePending
	if !o.ready {
		state = job.StateScheduled
	}
	return Enqueued{ID: o.id, State: state, RunAt: o.runAt}, nil
}

// BackfillSchedule enqueues the schedule's occurrences in [from, to) that were not enqueued
// before, at most schedule.MaxFires, as if each had fired (its job is due now). The schedule's
// own times and last occurrence do not change.
func (b *Broker) BackfillSchedule(ctx context.Context, name string, from, to time.Time) (Backfilled, error) {
	if !from.Before(to) {
		return Backfilled{}, invalidSchedule(fmt.Errorf("backfill range: from (%s) must be before to (%s)", from.Format(time.RFC3339), to.Format(time.RFC3339)))
	}
	now := b.now()
	var out Backfilled
	var fired []occurrence
	err := b.do(ctx, "schedule.backfill", func(tx store.Tx) error {
		out, fired = Backfilled{}, nil
		r, err := tx.ScheduleLock(name)
		if err != nil {
			return err
		}
		def, tt, err := decodeSchedule(r)
		if err != nil {
			return err
		}
		times := tt.Between(from, to, schedule.MaxFires+1)
		if len(times) > schedule.MaxFires {
			return invalidSchedule(fmt.Errorf("backfill range holds more than %d occurrences of %q; backfill it in parts", schedule.MaxFires, def.Cron))
		}
		for _, at := range times {
			o, err := b.enqueueOccurrence(tx, def, at, now)
			if err != nil {
				return err
			}
			if !o.added {
				out.Existing++
				continue
			}
			fired = append(fired, o)
			out.JobIDs = append(out.JobIDs, o.id)
		}
		return b.audit(ctx, tx, &store.AuditEvent{Action: AuditScheduleBackfill, Target: name,
			Detail: from.Format(time.RFC3339) + ".." + to.Format(time.RFC3339), Count: int64(len(out.JobIDs)), JobIDs: out.JobIDs})
	})
	if err != nil {
		return Backfilled{}, err
	}
	b.occurrencesStored(fired)
	return out, nil
}

// armSchedules sets the scheduler's alarm for the earliest schedule, at the start: at once for
// those that came due while no broker ran. A broker with no schedule arms nothing.
func (b *Broker) armSchedules(ctx context.Context) error {
	recs, err := b.st.ScheduleList(ctx)
	if err != nil {
		return fmt.Errorf("read the schedules: %w", err)
	}
	for _, r := range recs {
		switch {
		case r.Paused:
		case !r.BufferedFireAt.IsZero():
			b.svc.schedules.wake(b.now())
		default:
			b.svc.schedules.wake(r.NextFireAt)
		}
	}
	return nil
}

// declareSchedules makes the stored schedules declared in the configuration file match defs,
// at the start: new ones are added, changed ones updated as UpdateSchedule would, those no
// longer declared removed. A schedule an operator added through the API with a name the file
// now declares becomes the file's. Pauses are kept.
func (b *Broker) declareSchedules(ctx context.Context, defs []schedule.Definition) error {
	now := b.now()
	declared := make(map[string]bool, len(defs))
	for i := range defs {
		def := &defs[i]
		declared[def.Name] = true
		tt, err := def.Validate()
		if err != nil {
			return err
		}
		spec, err := def.Encode()
		if err != nil {
			return err
		}
		err = b.do(ctx, "schedule.declare", func(tx store.Tx) error {
			cur, err := tx.ScheduleLock(def.Name)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			if cur != nil && cur.FromConfig && bytes.Equal(cur.Spec, spec) {
				return nil
			}
			r := replaceSpec(cur, def, spec, tt, now)
			r.FromConfig = true
			return tx.ScheduleSave(r)
		})
		if err != nil {
			return fmt.Errorf("declare schedule %q: %w", def.Name, err)
		}
	}
	return b.forgetUndeclared(ctx, declared)
}

// forgetUndeclared removes the schedules the configuration file declared before and no longer
// does.
func (b *Broker) forgetUndeclared(ctx context.Context, declared map[string]bool) error {
	recs, err := b.st.ScheduleList(ctx)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if !r.FromConfig || declared[r.Name] {
			continue
		}
		err := b.do(ctx, "schedule.declare", func(tx store.Tx) error {
			_, err := tx.ScheduleDelete(r.Name)
			return err
		})
		if err != nil {
			return fmt.Errorf("remove schedule %q, no longer in the configuration: %w", r.Name, err)
		}
		b.log.Info("removed a schedule no longer in the configuration", "schedule", r.Name)
	}
	return nil
}

// FormatFireTime is how a fire time is written in a job's metadata (MetadataScheduleFire).
func FormatFireTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// ParseFireTime reads a fire time from a job's metadata.
func ParseFireTime(s string) (time.Time, error) { return time.Parse(time.RFC3339Nano, s) }
