package lograte

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
)

func TestRepeatedErrorsHeldBack(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var out bytes.Buffer
	log := slog.New(New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}), 10*time.Second, clk))
	for range 200000 {
		log.Error("lease jobs", "err", "too many SQL variables")
	}
	log.Error("lease jobs", "err", "another cause") // other attributes: another line
	log.With("session", "s1").Error("lease jobs", "err", "too many SQL variables")
	for range 3 {
		log.Info("worker connected") // below Warn: never held back
	}
	clk.Advance(10 * time.Second)
	log.Error("lease jobs", "err", "too many SQL variables")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 7 {
		t.Fatalf("wrote %d lines, want 7:\n%s", len(lines), out.String())
	}
	if last := lines[6]; !strings.Contains(last, "repeated=199999") {
		t.Fatalf("the line after the window: %q, want repeated=199999", last)
	}
	if strings.Contains(lines[0], "repeated") {
		t.Fatalf("the first line: %q", lines[0])
	}
}

func TestManyDistinctLinesStayBounded(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var out bytes.Buffer
	h := New(slog.NewTextHandler(&out, nil), time.Second, clk)
	log := slog.New(h)
	for i := range 3 * maxKeys {
		log.Warn("distinct", "i", i)
	}
	if n := len(h.st.seen); n > maxKeys {
		t.Fatalf("remembers %d lines, more than %d", n, maxKeys)
	}
	if got := strings.Count(out.String(), "\n"); got != 3*maxKeys {
		t.Fatalf("wrote %d of %d distinct lines", got, 3*maxKeys)
	}
}
