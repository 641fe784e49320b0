// Package schedule decides what a periodic schedule does: when it fires (a cron expression in a
// time zone, parsed by github.com/netresearch/go-cron), and, at a moment, which occurrences to
// enqueue given the last occurrence's job, the overlap policy and the catch-up mode. It does no
// I/O and takes the time as an argument; the broker stores what it decides (broker/schedules.go).
//
// An occurrence is identified by its schedule's name and its fire time: the broker records
// each one it enqueued under that pair, in the transaction that enqueues its job and moves the
// schedule's next fire time on, so no occurrence is enqueued twice.
package schedule

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	// The IANA time zone database, built in: a broker in a container without one (distroless,
	// scratch) still reads time_zone. It adds about 410 KB to the binary (416,872 bytes, measured).
	_ "time/tzdata"

	cron "github.com/netresearch/go-cron"
)

// Overlap says what an occurrence does while the previous one's job has not finished
// (is not SUCCEEDED, DEAD or CANCELLED).
type Overlap int

const (
	// OverlapSkip drops the occurrence (the default).
	OverlapSkip Overlap = iota
	// OverlapBufferOne keeps one occurrence back and enqueues it once the previous job
	// finished; further ones are dropped while one is kept.
	OverlapBufferOne
	// OverlapAllowAll enqueues every occurrence, whatever runs.
	OverlapAllowAll
	// OverlapCancelPrevious cancels the previous job and enqueues the occurrence.
	OverlapCancelPrevious
)

var overlapNames = []string{"skip", "buffer_one", "allow_all", "cancel_previous"}

func (o Overlap) String() string {
	if o < 0 || int(o) >= len(overlapNames) {
		return fmt.Sprintf("overlap(%d)", int(o))
	}
	return overlapNames[o]
}

// ParseOverlap reads an overlap policy by name; "" is OverlapSkip.
func ParseOverlap(s string) (Overlap, error) {
	if s == "" {
		return OverlapSkip, nil
	}
	for i, n := range overlapNames {
		if strings.EqualFold(s, n) {
			return Overlap(i), nil
		}
	}
	return 0, fmt.Errorf("overlap %q is not one of %s", s, strings.Join(overlapNames, ", "))
}

// CatchUp says what happens to occurrences missed while no broker ran (reached more than
// LateGrace after their time).
type CatchUp int

const (
	// CatchUpLatest enqueues the latest missed occurrence within the window, once (the default).
	CatchUpLatest CatchUp = iota
	// CatchUpSkip drops every missed occurrence.
	CatchUpSkip
	// CatchUpAll enqueues every missed occurrence within the window, oldest first.
	CatchUpAll
)

var catchUpNames = []string{"latest", "skip", "all"}

func (c CatchUp) String() string {
	if c < 0 || int(c) >= len(catchUpNames) {
		return fmt.Sprintf("catch_up(%d)", int(c))
	}
	return catchUpNames[c]
}

// ParseCatchUp reads a catch-up mode by name; "" is CatchUpLatest.
func ParseCatchUp(s string) (CatchUp, error) {
	if s == "" {
		return CatchUpLatest, nil
	}
	for i, n := range catchUpNames {
		if strings.EqualFold(s, n) {
			return CatchUp(i), nil
		}
	}
	return 0, fmt.Errorf("catch_up %q is not one of %s", s, strings.Join(catchUpNames, ", "))
}

// Bounds of a definition and of what one decision may enqueue.
const (
	// LateGrace is how late an occurrence may be reached and still count as on time, not
	// missed: a leader change or a quick restart does not lose it, whatever the catch-up mode.
	LateGrace = time.Minute
	// DefaultCatchUpWindow is how far back missed occurrences are caught up by default.
	DefaultCatchUpWindow = 24 * time.Hour
	// MaxFires bounds the occurrences one decision enqueues (catch-up of all, a backfill); the
	// rest follow in the next.
	MaxFires = 1000
	// MaxJitter bounds a schedule's jitter.
	MaxJitter  = 24 * time.Hour
	maxNameLen = 128
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]+$`)

// Definition is what an operator declares: when a schedule fires and the job each occurrence
// enqueues. Zero fields take the broker's defaults, as an enqueue's do.
type Definition struct {
	Name     string `json:"name"`
	Cron     string `json:"cron"`
	TimeZone string `json:"time_zone,omitempty"`

	Type           string            `json:"type"`
	Payload        []byte            `json:"payload,omitempty"`
	Queue          string            `json:"queue,omitempty"`
	Priority       int               `json:"priority,omitempty"`
	MaxAttempts    int               `json:"max_attempts,omitempty"`
	AttemptTimeout time.Duration     `json:"attempt_timeout,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`

	// Jitter delays each occurrence's job by a random time in [0, Jitter), so that many
	// schedules on the same minute do not start at once.
	Jitter        time.Duration `json:"jitter,omitempty"`
	Overlap       Overlap       `json:"overlap,omitempty"`
	CatchUp       CatchUp       `json:"catch_up,omitempty"`
	CatchUpWindow time.Duration `json:"catch_up_window,omitempty"` // zero: DefaultCatchUpWindow
}

// Window is the catch-up window in force.
func (d *Definition) Window() time.Duration {
	if d.CatchUpWindow <= 0 {
		return DefaultCatchUpWindow
	}
	return d.CatchUpWindow
}

// Validate checks what the definition alone can tell, naming the field, and returns its
// timetable.
func (d *Definition) Validate() (*Timetable, error) {
	var errs []error
	if d.Name == "" || len(d.Name) > maxNameLen || !nameRE.MatchString(d.Name) {
		errs = append(errs, fmt.Errorf("name must be 1..%d characters of letters, digits and _.:-, got %q", maxNameLen, d.Name))
	}
	if d.Type == "" {
		errs = append(errs, errors.New("type is required"))
	}
	tt, err := Parse(d.Cron, d.TimeZone)
	if err != nil {
		errs = append(errs, err)
	}
	if d.Jitter < 0 || d.Jitter > MaxJitter {
		errs = append(errs, fmt.Errorf("jitter must be 0..%s, got %s", MaxJitter, d.Jitter))
	}
	if d.CatchUpWindow < 0 {
		errs = append(errs, fmt.Errorf("catch_up_window must not be negative, got %s", d.CatchUpWindow))
	}
	if d.Overlap < OverlapSkip || d.Overlap > OverlapCancelPrevious {
		errs = append(errs, fmt.Errorf("overlap %d is unknown", d.Overlap))
	}
	if d.CatchUp < CatchUpLatest || d.CatchUp > CatchUpAll {
		errs = append(errs, fmt.Errorf("catch_up %d is unknown", d.CatchUp))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("schedule %q: %w", d.Name, errors.Join(errs...))
	}
	return tt, nil
}

// Encode is the definition as the store keeps it.
func (d *Definition) Encode() ([]byte, error) { return json.Marshal(d) }

// Decode reads a definition Encode wrote.
func Decode(b []byte) (*Definition, error) {
	var d Definition
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("decode schedule: %w", err)
	}
	return &d, nil
}

// MarshalText and UnmarshalText keep the policies readable in the stored definition.
func (o Overlap) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

func (o *Overlap) UnmarshalText(b []byte) error {
	v, err := ParseOverlap(string(b))
	*o = v
	return err
}

func (c CatchUp) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

func (c *CatchUp) UnmarshalText(b []byte) error {
	v, err := ParseCatchUp(string(b))
	*c = v
	return err
}

// parser reads 5-field expressions with the descriptors (@daily, @hourly, @every 5m...), and
// keeps the day-of-month / day-of-week rule of Vixie cron (a day matches if either does),
// which is what users of crontab expect.
var parser = cron.MustNewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor | cron.DowOrDom)

// Timetable is a parsed cron expression in its time zone.
type Timetable struct {
	sched cron.Schedule
	loc   *time.Location
}

// Parse reads a cron expression ("*/5 * * * *", "@daily", "@every 5m") in the IANA time zone
// tz ("" is UTC).
func Parse(expr, tz string) (*Timetable, error) {
	loc := time.UTC
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil || tz == "Local" {
			return nil, fmt.Errorf("time_zone %q is not an IANA time zone (such as Europe/Paris)", tz)
		}
		loc = l
	}
	if strings.Contains(expr, "TZ=") {
		return nil, fmt.Errorf("cron %q: give the time zone as time_zone, not in the expression", expr)
	}
	s, err := parser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("cron %q: %v (want 5 fields: minute hour day-of-month month day-of-week, or @hourly, @daily, @weekly, @monthly, @yearly, @every DURATION)", expr, err)
	}
	if e, ok := s.(cron.ConstantDelaySchedule); ok && e.Delay < time.Second {
		return nil, fmt.Errorf("cron %q: @every must be at least 1s", expr)
	}
	tt := &Timetable{sched: s, loc: loc}
	if tt.Next(time.Unix(0, 0)).IsZero() {
		return nil, fmt.Errorf("cron %q never fires", expr)
	}
	return tt, nil
}

// Next is the first fire time strictly after t, in UTC; zero if there is none.
func (tt *Timetable) Next(t time.Time) time.Time {
	n := tt.sched.Next(t.In(tt.loc))
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// Between lists the fire times in [from, to), at most limit of them.
func (tt *Timetable) Between(from, to time.Time, limit int) []time.Time {
	var out []time.Time
	for t := tt.Next(from.Add(-time.Nanosecond)); !t.IsZero() && t.Before(to) && len(out) < limit; t = tt.Next(t) {
		out = append(out, t)
	}
	return out
}
