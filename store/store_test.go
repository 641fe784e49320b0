package store

import (
	"slices"
	"testing"
)

func TestDropQueue(t *testing.T) {
	for _, c := range []struct {
		name            string
		queues, exclude []string
		drop            string
		wantQueues      []string
		wantLeft        bool
	}{
		{"any queue", nil, []string{"a"}, "b", nil, true},
		{"one of several", []string{"a", "b"}, nil, "a", []string{"b"}, true},
		{"the last one", []string{"a"}, nil, "a", []string{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			queues, exclude := slices.Clone(c.queues), slices.Clone(c.exclude)
			p := &JobLeaseParams{Queues: queues, ExcludeQueues: exclude}
			if left := p.DropQueue(c.drop); left != c.wantLeft {
				t.Errorf("queues left = %t, want %t", left, c.wantLeft)
			}
			if !slices.Equal(p.Queues, c.wantQueues) || !slices.Contains(p.ExcludeQueues, c.drop) {
				t.Errorf("scope = %v without %v, want %v without %s", p.Queues, p.ExcludeQueues, c.wantQueues, c.drop)
			}
			if !slices.Equal(queues, c.queues) || !slices.Equal(exclude, c.exclude) {
				t.Errorf("the caller's slices changed: %v, %v", queues, exclude)
			}
		})
	}
}
