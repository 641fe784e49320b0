package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
)

// The outbox gives up on a worker once more than MaxOutboxBytes wait beside the largest waiting
// message: a job whose payload alone passes the limit (max_payload_bytes may be set to 64 MiB)
// is sent, while answers piling up behind a worker that does not read still end its stream.
func TestOutboxOverflowLeavesOutTheLargestMessage(t *testing.T) {
	t.Parallel()
	assignment := func(payload int) Message {
		return Assignment{Job: &job.Job{ID: 1, Payload: make([]byte, payload)}}
	}
	refusals := func(bytes int) []Message {
		var out []Message
		for n := 0; n <= bytes; n += messageSize(Refused{Message: string(make([]byte, 64<<10))}) {
			out = append(out, Refused{Message: string(make([]byte, 64<<10))})
		}
		return out
	}
	tests := []struct {
		name     string
		msgs     []Message
		overflow bool
	}{
		{"small ones within the limit", refusals(MaxOutboxBytes - 128<<10), false},
		{"small ones past the limit", refusals(MaxOutboxBytes + 64<<10), true},
		{"one job larger than the limit", []Message{assignment(20 << 20)}, false},
		{"one job larger than the limit, answers beside it", append([]Message{assignment(20 << 20)}, refusals(1<<20)...), false},
		{"one job larger than the limit, past the limit of answers beside it",
			append([]Message{assignment(20 << 20)}, refusals(MaxOutboxBytes+64<<10)...), true},
		{"two jobs that pass the limit together, the smaller alone", []Message{assignment(10 << 20), assignment(10 << 20)}, false},
		{"two jobs each larger than the limit", []Message{assignment(17 << 20), assignment(17 << 20)}, true},
	}
	for _, tt := range tests {
		o := newOutbox(time.Now)
		for _, m := range tt.msgs {
			o.push(m)
		}
		msgs, _, err := o.next(context.Background())
		switch {
		case tt.overflow && !errors.Is(err, ErrOutboxFull):
			t.Errorf("%s: next gave %d messages and %v, want ErrOutboxFull", tt.name, len(msgs), err)
		case !tt.overflow && (err != nil || len(msgs) != len(tt.msgs)):
			t.Errorf("%s: next gave %d messages of %d and %v, want them all", tt.name, len(msgs), len(tt.msgs), err)
		}
	}
}

// Once the send loop takes what waits, the largest message goes with it: what comes next is
// counted afresh.
func TestOutboxCountsAfreshAfterASend(t *testing.T) {
	t.Parallel()
	o := newOutbox(time.Now)
	o.push(Assignment{Job: &job.Job{ID: 1, Payload: make([]byte, 20<<20)}})
	if _, _, err := o.next(context.Background()); err != nil {
		t.Fatal(err)
	}
	o.push(Assignment{Job: &job.Job{ID: 2, Payload: make([]byte, 17<<20)}})
	o.push(Assignment{Job: &job.Job{ID: 3, Payload: make([]byte, 17<<20)}})
	if _, _, err := o.next(context.Background()); !errors.Is(err, ErrOutboxFull) {
		t.Fatalf("next after a send: %v, want ErrOutboxFull (the first job's size is forgotten)", err)
	}
}
