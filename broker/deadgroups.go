package broker

import (
	"cmp"
	"context"
	"regexp"
	"slices"
	"strings"

	"github.com/jobwire/jobwire/store"
)

// genericErrorTypes name no kind of error: the Go SDK reports "error" for an errors.New error
// (older Go workers reported its type, *errors.errorString), and plain Error and Exception are
// what JavaScript and Python code throws when it does not bother with a class. Grouping the
// dead-letter queue by them lumps unrelated failures together, so their jobs are grouped by
// what their messages say instead.
var genericErrorTypes = map[string]bool{
	"":                    true,
	"error":               true,
	"*errors.errorString": true,
	"*fmt.wrapError":      true,
	"*fmt.wrapErrors":     true,
	"*errors.joinError":   true,
	"Error":               true,
	"Exception":           true,
}

// fingerprintRead caps the dead jobs of one generic error type read to fingerprint them, newest
// first; older ones stay in a group of the type alone.
const fingerprintRead = 10_000

var (
	uuidPattern   = regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	hexPattern    = regexp.MustCompile(`(?i)\b(0x[0-9a-f]+|[0-9a-f]{6,})\b`)
	numberPattern = regexp.MustCompile(`\d+`)
)

// Fingerprint is msg with what changes from one occurrence of an error to the next taken out:
// UUIDs, hex ids (six hex digits or more with a digit and a letter among them, or 0x...) and numbers become <uuid>,
// <hex> and <n>. "order 1234 not found (req 9f86d081)" and "order 77 not found (req 0c1a2b3c)"
// share "order <n> not found (req <hex>)".
func Fingerprint(msg string) string {
	msg = uuidPattern.ReplaceAllString(msg, "<uuid>")
	msg = hexPattern.ReplaceAllStringFunc(msg, func(w string) string {
		// Words such as "facade" are hex digits too; an id has a digit and a letter.
		if len(w) > 2 && (w[1] == 'x' || w[1] == 'X') || strings.ContainsAny(w, "0123456789") && strings.ContainsAny(w, "abcdefABCDEF") {
			return "<hex>"
		}
		return w
	})
	return numberPattern.ReplaceAllString(msg, "<n>")
}

// splitGeneric replaces each group of a generic error type by groups of the message
// fingerprints of its jobs, then orders and cuts the groups again.
func (b *Broker) splitGeneric(ctx context.Context, f *store.DeadJobFilter, groups []store.DeadErrorGroup, limit int) ([]store.DeadErrorGroup, error) {
	var out []store.DeadErrorGroup
	for _, g := range groups {
		if !genericErrorTypes[g.ErrorType] {
			out = append(out, g)
			continue
		}
		split, err := b.fingerprintGroups(ctx, f, g)
		if err != nil {
			return nil, err
		}
		out = append(out, split...)
	}
	slices.SortStableFunc(out, func(x, y store.DeadErrorGroup) int {
		if c := cmp.Compare(y.Count, x.Count); c != 0 {
			return c
		}
		return y.LastSeen.Compare(x.LastSeen)
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// fingerprintGroups groups the dead jobs of g's type by message fingerprint, newest first.
func (b *Broker) fingerprintGroups(ctx context.Context, f *store.DeadJobFilter, g store.DeadErrorGroup) ([]store.DeadErrorGroup, error) {
	p := &store.DeadJobListParams{Filter: *f, Limit: 500}
	p.Filter.ErrorType = g.ErrorType
	index := map[string]int{}
	var out []store.DeadErrorGroup
	read := int64(0)
	for read < fingerprintRead {
		jobs, err := b.st.JobListDead(ctx, p)
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			fp := Fingerprint(j.LastErrorMessage)
			i, ok := index[fp]
			if !ok {
				// Newest first: the first job of a fingerprint is its newest.
				i = len(out)
				index[fp] = i
				out = append(out, store.DeadErrorGroup{ErrorType: g.ErrorType, Fingerprint: fp,
					LastSeen: j.FinishedAt, SampleMessage: j.LastErrorMessage})
			}
			out[i].Count++
			read++
		}
		if len(jobs) < p.Limit {
			break
		}
		last := jobs[len(jobs)-1]
		p.After = &store.ListCursor{Int: last.FinishedAt.UnixNano(), ID: last.ID}
	}
	if rest := g.Count - read; rest > 0 {
		// Beyond what was read, the group stays whole.
		out = append(out, store.DeadErrorGroup{ErrorType: g.ErrorType, Count: rest, LastSeen: g.LastSeen, SampleMessage: g.SampleMessage})
	}
	return out, nil
}
