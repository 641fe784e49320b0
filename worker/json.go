package worker

import (
	"context"
	"encoding/json"
	"fmt"
)

// HandleJSON registers fn for jobType with the payload decoded from JSON into a T.
//
// A payload that does not decode fails the attempt fatally: the same bytes will not decode on the
// next attempt either. An empty payload leaves args at T's zero value, so job types without
// arguments may be enqueued without one.
func HandleJSON[T any](w *Worker, jobType string, fn func(ctx context.Context, j *Job, args T) error) {
	if fn == nil {
		panic("worker: nil handler for job type " + jobType)
	}
	w.Handle(jobType, func(ctx context.Context, j *Job) error {
		var args T
		if len(j.Payload) > 0 {
			if err := json.Unmarshal(j.Payload, &args); err != nil {
				return Fatal(fmt.Errorf("decode %s payload: %w", jobType, err))
			}
		}
		return fn(ctx, j, args)
	})
}
