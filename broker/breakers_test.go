package broker_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/broker"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/store/sqlite"
	"github.com/jobwire/jobwire/store/sqlite/sqlitetest"
)

// lockedBuffer is a log destination safe for the broker's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestBreakerTransitionsAreLogged checks that every transition, automatic or by an operator,
// leaves one log line naming the type, both states and the reason, as names even in JSON.
func TestBreakerTransitionsAreLogged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlitetest.Path(t), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	var logs lockedBuffer
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	b, err := broker.New(broker.Options{Store: st, Commit: brokertest.Commit(), Config: broker.DefaultConfig(), Clock: clk,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = b.Shutdown(ctx)
	})

	if _, err := b.ForceBreaker(context.Background(), "mail", breaker.StateOpen); err != nil {
		t.Fatal(err)
	}
	clk.Advance(breaker.DefaultOpenFor)
	if got := b.Breakers(); len(got) != 1 || got[0].State != breaker.StateHalfOpen {
		t.Fatalf("after OpenFor: %+v", got)
	}
	if _, err := b.ResetBreaker(context.Background(), "mail"); err != nil {
		t.Fatal(err)
	}

	type line struct {
		Msg, Type, From, To, Reason string
		Generation                  int64
	}
	var got []line
	sc := bufio.NewScanner(bytes.NewBufferString(logs.String()))
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if l.Msg == "circuit breaker transition" {
			got = append(got, l)
		}
	}
	want := []line{
		{"circuit breaker transition", "mail", "CLOSED", "OPEN", "forced", 2},
		{"circuit breaker transition", "mail", "OPEN", "HALF_OPEN", "open_elapsed", 3},
		{"circuit breaker transition", "mail", "HALF_OPEN", "CLOSED", "reset", 4},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("transition log lines:\n got %+v\nwant %+v\nall logs:\n%s", got, want, logs.String())
	}
}
