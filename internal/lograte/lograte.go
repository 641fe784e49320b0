// Package lograte keeps repeated log lines from flooding the log: a loop that fails the same way
// thousands of times a second (a worker stream sending garbage, storage that keeps refusing a
// checkpoint) writes one line per window, and the next line says how many were held back.
package lograte

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
)

// DefaultWindow is how long an identical warning or error is held back after it was written.
const DefaultWindow = 10 * time.Second

// maxKeys bounds the lines remembered; past it, the ones outside their window are forgotten.
const maxKeys = 4096

// Handler passes records to the next handler, except that a record at Warn or above identical
// to one written within the window (same level, message and attributes) is only counted. The
// first identical record written after the window carries repeated=N, the number held back.
// Records below Warn always pass.
type Handler struct {
	next   slog.Handler
	window time.Duration
	clk    clock.Clock
	st     *state
	scope  string // the attributes and groups added with WithAttrs and WithGroup
}

type state struct {
	mu   sync.Mutex
	seen map[string]*entry
}

type entry struct {
	written time.Time
	held    int
}

// New wraps next; window 0 means DefaultWindow, clk nil the real clock.
func New(next slog.Handler, window time.Duration, clk clock.Clock) *Handler {
	if window <= 0 {
		window = DefaultWindow
	}
	if clk == nil {
		clk = clock.Real{}
	}
	return &Handler{next: next, window: window, clk: clk, st: &state{seen: make(map[string]*entry)}}
}

func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return h.next.Handle(ctx, r)
	}
	key := h.key(r)
	now := h.clk.Now()
	h.st.mu.Lock()
	e := h.st.seen[key]
	if e != nil && now.Sub(e.written) < h.window {
		e.held++
		h.st.mu.Unlock()
		return nil
	}
	held := 0
	if e != nil {
		held = e.held
	} else {
		if len(h.st.seen) >= maxKeys {
			h.st.forget(now, h.window)
		}
		e = &entry{}
		h.st.seen[key] = e
	}
	e.written, e.held = now, 0
	h.st.mu.Unlock()
	if held > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("repeated", held))
	}
	return h.next.Handle(ctx, r)
}

// forget drops the lines outside their window, or every line if all are within it.
func (s *state) forget(now time.Time, window time.Duration) {
	for k, e := range s.seen {
		if now.Sub(e.written) >= window {
			delete(s.seen, k)
		}
	}
	if len(s.seen) >= maxKeys {
		clear(s.seen)
	}
}

func (h *Handler) key(r slog.Record) string {
	var b strings.Builder
	b.WriteString(r.Level.String())
	b.WriteByte(0)
	b.WriteString(h.scope)
	b.WriteByte(0)
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteByte(0)
		b.WriteString(a.String())
		return true
	})
	return b.String()
}

func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(as)
	var b strings.Builder
	b.WriteString(h.scope)
	for _, a := range as {
		b.WriteByte(1)
		b.WriteString(a.String())
	}
	c.scope = b.String()
	return &c
}

func (h *Handler) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	c.scope = h.scope + "\x02" + name
	return &c
}
