package postgres

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobwire/jobwire/store"
)

// refusingServer answers every connection as a PostgreSQL server that is starting up does: it
// reads the startup message, sends FATAL 57P03 and hangs up. It records when each came.
type refusingServer struct {
	ln net.Listener
	mu sync.Mutex
	at []time.Time
}

func newRefusingServer(t *testing.T) *refusingServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &refusingServer{ln: ln}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.at = append(r.at, time.Now())
			r.mu.Unlock()
			refuse(c)
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return r
}

// refuse reads a startup message from c and answers with an ErrorResponse.
func refuse(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(clusterWait))
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return
	}
	if _, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(n[:]))-4); err != nil {
		return
	}
	var fields []byte
	for _, f := range []string{"SFATAL", "VFATAL", "C57P03", "Mthe database system is starting up"} {
		fields = append(append(fields, f...), 0)
	}
	fields = append(fields, 0)
	msg := binary.BigEndian.AppendUint32([]byte{'E'}, uint32(4+len(fields)))
	_, _ = c.Write(append(msg, fields...))
}

func (r *refusingServer) attempts() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.at...)
}

// While PostgreSQL refuses connections, Listen tries again with its backoff: reconnectMin,
// then twice that, and so on. A wait that returns at once would have a broker hammer a
// database that is down with connection attempts. Needs no PostgreSQL: the refusing server
// speaks just enough of its protocol.
func TestListenBacksOffWhileTheDatabaseRefuses(t *testing.T) {
	t.Parallel()
	srv := newRefusingServer(t)
	cfg, err := pgxpool.ParseConfig("postgres://jobwire@" + srv.ln.Addr().String() + "/jobwire?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg) // connects lazily: never here
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := &Store{pool: pool, log: slog.New(slog.DiscardHandler), brokerID: 1, channel: "jobwire_test"}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Listen(ctx, func(e store.Event) { t.Errorf("Listen delivered %+v without a connection", e) })
	}()
	defer func() { cancel(); <-done }()

	// The third attempt follows two waits: reconnectMin and 2*reconnectMin. Real time passes at
	// least that long however loaded the machine is; an attempt sooner means Listen did not wait.
	waitFor(t, "three connection attempts", func() bool { return len(srv.attempts()) >= 3 })
	at := srv.attempts()
	if gap := at[1].Sub(at[0]); gap < reconnectMin {
		t.Errorf("second attempt %s after the first, want at least %s (attempts: %d)", gap, reconnectMin, len(at))
	}
	if gap := at[2].Sub(at[1]); gap < 2*reconnectMin {
		t.Errorf("third attempt %s after the second, want at least %s (attempts: %d)", gap, 2*reconnectMin, len(at))
	}
}
