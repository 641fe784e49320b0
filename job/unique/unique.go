// Package unique decides what makes two jobs the same work: a unique key computed once, when a
// job is enqueued, from its type, its queue, a key the producer gives, its payload or chosen
// fields, and the period it was enqueued in; and the set of states in which a job holds that
// key. The store enforces it with a unique index over the key of the jobs in their states, so
// it holds across every broker sharing a database, and this package does no I/O.
//
// It differs from the idempotency key: that one names one request, so a repeat must match the
// stored job in every field and is answered with it forever (until the job is deleted); a
// unique key names the work, so a job of other content for the same work is a duplicate too,
// and the key is free again once its holder leaves the states (or the period ends).
package unique

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/job/jobkey"
)

// Limits on options.
const (
	MaxKeyLen  = 255
	MaxFields  = 16
	MinPeriod  = time.Second
	MaxPeriod  = 366 * 24 * time.Hour
	hashPrefix = "jobwire.unique.v1"
)

// Options say what makes a job unique. The zero value of each field adds nothing to the key:
// Options{} makes a job unique by type and queue alone.
type Options struct {
	// Key is a key the producer gives (a customer id, a report name).
	Key string
	// ByPayload adds a hash of the whole payload.
	ByPayload bool
	// Fields adds the values of these job keys (jobkey expressions: "payload.FIELD",
	// "metadata.NAME").
	Fields []string
	// AcrossQueues leaves the queue out, so one job among all queues.
	AcrossQueues bool
	// Period, when set, makes the job unique only within its window of this length (windows
	// are aligned to the Unix epoch), the window its run time falls in.
	Period time.Duration
	// States are the states in which a job holds the key; nil: DefaultStates.
	States []job.State
}

// Waiting are the states a job's key must be held in whatever the options say: a job moves
// among them (a retry goes RUNNING, then SCHEDULED, then PENDING) and could not come back
// into the set if another job had taken its key while it was out.
var Waiting = []job.State{job.StateScheduled, job.StatePending, job.StateLeased, job.StateRunning}

// All is every state: a key held for good, until the job is deleted.
var All = []job.State{job.StateScheduled, job.StatePending, job.StateLeased, job.StateRunning,
	job.StateSucceeded, job.StateDead, job.StateCancelled}

// DefaultStates are the states a job holds its key in when the options name none: while it
// waits or runs, or, with a period, in every state, so that a period admits one job.
func (o *Options) DefaultStates() []job.State {
	if o.Period > 0 {
		return All
	}
	return Waiting
}

// ErrInvalid is matched by the error of options that cannot be used.
var ErrInvalid = errors.New("invalid unique options")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Check reports what is wrong with o, if anything, naming the field.
func (o *Options) Check() error {
	if len(o.Key) > MaxKeyLen {
		return invalid("key must be at most %d characters, got %d", MaxKeyLen, len(o.Key))
	}
	if len(o.Fields) > MaxFields {
		return invalid("fields names %d fields, more than the limit of %d", len(o.Fields), MaxFields)
	}
	for i, f := range o.Fields {
		e, err := jobkey.Parse(f)
		if err != nil {
			return invalid("fields[%d]: %v", i, err)
		}
		if e.Kind() != jobkey.Payload && e.Kind() != jobkey.Metadata {
			return invalid("fields[%d] is %q: name a payload.FIELD or a metadata.NAME (type and queue are in the key already)", i, f)
		}
	}
	if o.Period != 0 && (o.Period < MinPeriod || o.Period > MaxPeriod) {
		return invalid("period must be %s..%s, got %s", MinPeriod, MaxPeriod, o.Period)
	}
	for i, s := range o.States {
		if !slices.Contains(All, s) {
			return invalid("states[%d] is not a job state", i)
		}
	}
	if len(o.States) > 0 {
		for _, s := range []job.State{job.StateScheduled, job.StatePending, job.StateRunning} {
			if !slices.Contains(o.States, s) {
				return invalid("states must include SCHEDULED, PENDING and RUNNING, and lacks %s: a job that left the states "+
					"while waiting or running and came back could meet its own duplicate", s)
			}
		}
	}
	return nil
}

// Mask is a set of states as stored with a job: bit s for state s. A job holds its key while
// its state's bit is set.
type Mask int

// MaskOf is the set of states, with LEASED always in it (a job passes through it between
// PENDING and RUNNING).
func MaskOf(states []job.State) Mask {
	var m Mask
	for _, s := range states {
		m |= 1 << s
	}
	return m | 1<<job.StateLeased
}

// Has reports whether s is in m.
func (m Mask) Has(s job.State) bool { return m&(1<<s) != 0 }

// States lists m's states in their order.
func (m Mask) States() []job.State {
	var out []job.State
	for _, s := range All {
		if m.Has(s) {
			out = append(out, s)
		}
	}
	return out
}

// Source is the job a key is computed for.
type Source struct {
	Type     string
	Queue    string
	Payload  []byte
	Metadata map[string]string
	// At is when the job is due to run (its run_at: now, or later for a delayed job), which
	// picks its period, so a job scheduled for tomorrow counts in tomorrow's window.
	At time.Time
}

// KeyOf is the unique key of the job src under o, and the states it holds it in. o must have
// passed Check. The key is the hex of a SHA-256 over the parts, each length-prefixed, so no
// choice of values makes two different sets of parts collide by concatenation.
func (o *Options) KeyOf(src Source) (string, Mask) {
	h := sha256.New()
	part := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	part([]byte(hashPrefix))
	part([]byte(src.Type))
	if o.AcrossQueues {
		part(nil)
	} else {
		part([]byte("q:" + src.Queue))
	}
	part([]byte(o.Key))
	if o.ByPayload {
		sum := sha256.Sum256(src.Payload)
		part(sum[:])
	} else {
		part(nil)
	}
	for _, f := range o.Fields {
		e, _ := jobkey.Parse(f)
		v, ok := e.Of(jobkey.Source{Type: src.Type, Queue: src.Queue, Metadata: src.Metadata, Payload: src.Payload})
		part([]byte(f))
		if ok {
			part([]byte("=" + v))
		} else {
			part(nil) // absent, unlike any value (which starts with "=")
		}
	}
	if o.Period > 0 {
		window := src.At.UnixNano() / int64(o.Period)
		part(binary.BigEndian.AppendUint64(nil, uint64(window)))
	} else {
		part(nil)
	}
	states := o.States
	if len(states) == 0 {
		states = o.DefaultStates()
	}
	return hex.EncodeToString(h.Sum(nil)), MaskOf(states)
}
