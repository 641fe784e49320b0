package postgres

import (
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"
)

// idBlock is how many job ids a store draws from the jobs' sequence at a time.
const idBlock = 1024

// idCache keeps job ids drawn from the jobs' sequence and not used yet, so that an insert
// needs no round trip of its own to learn its jobs' ids: one draw serves many writes. The ids
// stay unique across brokers (each draws its own from the sequence) and are handed out in
// ascending order by each broker; an id drawn by a write that rolls back is never used, as
// with a sequence's own cache.
type idCache struct {
	mu  sync.Mutex
	ids []int64 // ascending
}

// take returns n ids, drawing more in t when it has too few.
func (c *idCache) take(t *tx, n int) ([]int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ids) < n {
		rows, err := t.tx.Query(t.ctx, drawIDsSQL, max(n-len(c.ids), idBlock))
		if err != nil {
			return nil, err
		}
		drawn, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return nil, err
		}
		// Another broker drawing at the same time can interleave with this draw, but what
		// one draw returns comes after everything this store drew before.
		c.ids = append(c.ids, drawn...)
		slices.Sort(c.ids[len(c.ids)-len(drawn):])
	}
	out := slices.Clone(c.ids[:n])
	c.ids = c.ids[n:]
	return out, nil
}
