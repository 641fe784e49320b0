package store

import (
	"fmt"
	"slices"

	"github.com/jobwire/jobwire/job"
)

// ListSort names a column a listing of jobs can be sorted by, as the admin API names it.
type ListSort string

// The columns listings sort by. Each is NOT NULL in both stores' jobs table, so a page's last
// value is always there to continue from.
const (
	SortCreatedAt ListSort = "created_at"
	SortDiedAt    ListSort = "died_at" // finished_at of a dead job
	SortID        ListSort = "id"
	SortType      ListSort = "type"
	SortQueue     ListSort = "queue"
	SortState     ListSort = "state"
	SortPriority  ListSort = "priority"
	SortRunAt     ListSort = "run_at"
	SortAttempts  ListSort = "attempts"
	SortReason    ListSort = "reason" // dead_reason
	SortErrorType ListSort = "error_type"
)

// JobSorts are the columns JobList sorts by, its default first; DeadSorts are JobListDead's.
var (
	JobSorts  = []ListSort{SortCreatedAt, SortID, SortType, SortQueue, SortState, SortPriority, SortRunAt, SortAttempts}
	DeadSorts = []ListSort{SortDiedAt, SortCreatedAt, SortID, SortType, SortQueue, SortAttempts, SortReason, SortErrorType}
)

// sortColumn is where a ListSort's values live: the column of jobs and whether it holds text.
// value reads a listed job's value of it, as the store holds it (times in Unix nanoseconds).
type sortColumn struct {
	name  string
	text  bool
	value func(j *job.Job) (int64, string)
}

var sortColumns = map[ListSort]sortColumn{
	SortCreatedAt: {"created_at", false, func(j *job.Job) (int64, string) { return j.CreatedAt.UnixNano(), "" }},
	SortDiedAt:    {"finished_at", false, func(j *job.Job) (int64, string) { return j.FinishedAt.UnixNano(), "" }},
	SortID:        {"id", false, func(j *job.Job) (int64, string) { return j.ID, "" }},
	SortType:      {"type", true, func(j *job.Job) (int64, string) { return 0, j.Type }},
	SortQueue:     {"queue", true, func(j *job.Job) (int64, string) { return 0, j.Queue }},
	SortState:     {"state", false, func(j *job.Job) (int64, string) { return int64(j.State), "" }},
	SortPriority:  {"priority", false, func(j *job.Job) (int64, string) { return int64(j.Priority), "" }},
	SortRunAt:     {"run_at", false, func(j *job.Job) (int64, string) { return j.RunAt.UnixNano(), "" }},
	SortAttempts:  {"attempts", false, func(j *job.Job) (int64, string) { return int64(j.Attempts), "" }},
	SortReason:    {"dead_reason", false, func(j *job.Job) (int64, string) { return int64(j.DeadReason), "" }},
	SortErrorType: {"last_error_type", true, func(j *job.Job) (int64, string) { return 0, j.LastErrorType }},
}

// ListOrder is the order of a listing: by a column, ties broken by id, both ascending or both
// descending. The zero value is the listing's default column, descending: newest first.
type ListOrder struct {
	By  ListSort // "": the listing's default (JobSorts[0], DeadSorts[0])
	Asc bool
}

// ListCursor is where a page in a ListOrder ended: the last job's value in the sort column
// (Int for numbers and times, in Unix nanoseconds; Str for text) and its id. Paging by the value
// and the id, not by an offset, keeps a page from skipping or repeating jobs while others are
// added or removed.
type ListCursor struct {
	Int int64
	Str string
	ID  int64
}

// Keyset is a ListOrder resolved for one listing, what a store renders into SQL: the column,
// whether it holds text, the direction and the comparison that selects the rows after a cursor.
type Keyset struct {
	Column string
	Text   bool
	Dir    string // "ASC" or "DESC"
	After  string // ">" or "<"
	value  func(j *job.Job) (int64, string)
}

// Keyset resolves o against the columns a listing allows (JobSorts or DeadSorts), or fails for
// a column that listing does not sort by.
func (o ListOrder) Keyset(allowed []ListSort) (Keyset, error) {
	by := o.By
	if by == "" {
		by = allowed[0]
	}
	c, ok := sortColumns[by]
	if !ok || !slices.Contains(allowed, by) {
		return Keyset{}, fmt.Errorf("store: this listing does not sort by %q", by)
	}
	k := Keyset{Column: c.name, Text: c.text, Dir: "DESC", After: "<", value: c.value}
	if o.Asc {
		k.Dir, k.After = "ASC", ">"
	}
	return k, nil
}

// Value is the cursor's value to compare the column with.
func (k Keyset) Value(c *ListCursor) any {
	if k.Text {
		return c.Str
	}
	return c.Int
}

// CursorOf is j's position in the order o of a listing that allows the columns allowed.
func (o ListOrder) CursorOf(allowed []ListSort, j *job.Job) (ListCursor, error) {
	k, err := o.Keyset(allowed)
	if err != nil {
		return ListCursor{}, err
	}
	n, s := k.value(j)
	return ListCursor{Int: n, Str: s, ID: j.ID}, nil
}
