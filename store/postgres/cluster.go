package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/reach"
	"github.com/jobwire/jobwire/store/storeretry"
)

// Several brokers serve one database at once, each through its own Store. The store is their
// store.Cluster:
//
//   - Each Store registers as a broker when it opens: a row in the brokers table whose identity
//     number is its BrokerID, never handed out again.
//   - Events a transaction publishes (Tx.Publish) are sent with pg_notify inside that
//     transaction, just before COMMIT, so PostgreSQL delivers them only if it commits, and in
//     commit order. Listen receives them on a connection of its own.
//   - The leader holds a session advisory lock on a connection of its own (Campaign).
//
// The notification channel and the lock key are derived from the schema the store works in
// (advisory locks and notifications are per database already), so brokers of different
// schemas on one server never see each other.

var _ store.Cluster = (*Store)(nil)

// DefaultElectionInterval is how often a broker that does not lead tries to take the leadership,
// and how often the leader checks that the session holding it is alive.
const DefaultElectionInterval = time.Second

// DefaultLeaderTimeout is how long the leader may go without recording that it is alive
// before another broker ends its session and takes the leadership (Options.LeaderTimeout):
// five election intervals, far more than a busy but running broker ever lets pass between two
// heartbeats, little enough that scheduled jobs wait seconds, not for as long as a frozen
// leader stays frozen.
const DefaultLeaderTimeout = 5 * time.Second

// dbNow is the database server's clock in Unix nanoseconds, the unit of the brokers table.
// last_seen is written and compared with it alone, so brokers whose machines' clocks disagree
// still agree on how long ago another was seen.
const dbNow = `(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint`

// Reconnect backoff of the listening and leadership connections.
const (
	reconnectMin = 100 * time.Millisecond
	reconnectMax = 5 * time.Second
)

// keepAlive makes the dedicated connections notice a peer that vanished without closing the
// connection (a machine lost, a network cut) in about Idle + Count*Interval, not the system's
// default of hours: the listening connection would otherwise wait for notifications forever.
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 2 * time.Second, Count: 3}

// aliveFor is how many election intervals a broker may go unseen and still be listed alive: its
// heartbeat may wait up to one interval for its turn and another for its answer.
const aliveFor = 3

// register adds this store's row to the brokers table and takes its id.
func (s *Store) register(ctx context.Context, addr string) error {
	host, _ := os.Hostname()
	var id int64
	if err := s.pool.QueryRow(ctx, `INSERT INTO brokers (addr, pid, host, started_at, last_seen)
		VALUES ($1, $2, $3, `+dbNow+`, `+dbNow+`) RETURNING id`, addr, os.Getpid(), host).Scan(&id); err != nil {
		return fmt.Errorf("register the broker: %w", err)
	}
	var schema string
	if err := s.pool.QueryRow(ctx, `SELECT to_hex(`+schemaKey+`)`).Scan(&schema); err != nil {
		return fmt.Errorf("read the schema: %w", err)
	}
	s.brokerID, s.brokerName = id, strconv.FormatInt(id, 10)
	s.channel = "jobwire_events_" + schema
	return nil
}

// BrokerID is this store's broker number among every broker that has opened the database.
func (s *Store) BrokerID() string { return s.brokerName }

// Brokers lists every broker that has opened the database, oldest first, with which one leads
// now: the broker whose "leader" session (application_name, see connect) holds the schema's
// leader lock.
func (s *Store) Brokers(ctx context.Context) ([]store.BrokerRecord, error) {
	var out []store.BrokerRecord
	err := s.read(ctx, "broker_list", func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, `SELECT b.id, b.addr, b.pid, b.host, b.started_at, b.last_seen,
			EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
				WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
				AND l.classid = $1 AND l.objid = (`+schemaKey+`)::oid AND l.objsubid = 2
				AND a.application_name = 'jobwire broker ' || b.id || ' leader'),
			`+dbNow+` - b.last_seen, b.workers
			FROM brokers b ORDER BY b.id`, lockLeader)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r store.BrokerRecord
			var id, started, seen, silent int64
			if err := rows.Scan(&id, &r.Addr, &r.PID, &r.Host, &started, &seen, &r.Leader, &silent, &r.Workers); err != nil {
				return err
			}
			r.ID, r.StartedAt, r.LastSeen = strconv.FormatInt(id, 10), fromNanos(started), fromNanos(seen)
			// By the database's clock, which wrote last_seen: this machine's may be off.
			r.Alive = time.Duration(silent) <= s.aliveWindow
			out = append(out, r)
		}
		return rows.Err()
	})
	return out, err
}

// wireEvent is an event as it travels in a notification's payload.
type wireEvent struct {
	Kind store.EventKind `json:"k"`
	Key  string          `json:"key,omitempty"`
	From string          `json:"f"`
}

// sendEvents sends the transaction's events; Write calls it just before COMMIT.
func (t *tx) sendEvents(channel, from string) error {
	defer t.frontSafe()()
	if len(t.events) == 0 {
		return nil
	}
	payloads := make([]string, 0, len(t.events))
	for e := range t.events {
		if e.From == "" {
			e.From = from
		}
		b, err := json.Marshal(wireEvent{Kind: e.Kind, Key: e.Key, From: e.From})
		if err != nil {
			return err
		}
		payloads = append(payloads, string(b))
	}
	// Held: it goes to the server with COMMIT, in the same round trip.
	return t.hold(notifySQL, channel, payloads)
}

const notifySQL = `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`

// connect opens a connection of its own, outside the pool, for listening or leading. Its
// application_name, "jobwire broker N listen" or "jobwire broker N leader", tells operators
// (pg_stat_activity) which broker's which session it is.
func (s *Store) connect(ctx context.Context, role string) (*pgx.Conn, error) {
	cfg := s.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = s.sessionName(role)
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAliveConfig: keepAlive}
	cfg.DialFunc = d.DialContext
	return pgx.ConnectConfig(ctx, cfg)
}

// Listen delivers every event published on the database (by this broker too) until ctx ends,
// on a connection of its own that LISTENs on the schema's channel. When that connection is
// lost it connects again with backoff, and delivers an EventResync once it listens again: what
// was published meanwhile is not delivered.
func (s *Store) Listen(ctx context.Context, fn func(store.Event)) {
	gap := false
	wait := reconnectMin
	for ctx.Err() == nil {
		conn, err := s.listenConn(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !gap {
				s.log.Warn("cannot listen for other brokers' events; retrying", "broker", s.BrokerID(), "err", err)
			}
			gap = true
			if !sleep(ctx, wait) {
				return
			}
			wait = min(2*wait, reconnectMax)
			continue
		}
		wait = reconnectMin
		if gap {
			s.fronts.reset() // what other brokers published meanwhile is not delivered
			s.log.Info("listening for other brokers' events again", "broker", s.BrokerID())
			fn(store.Event{Kind: store.EventResync, From: s.BrokerID()})
		}
		err = s.receive(ctx, conn, fn)
		_ = conn.Close(context.Background())
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("lost the connection that listens for other brokers' events; reconnecting", "broker", s.BrokerID(), "err", err)
		gap = true
	}
}

// Listeners counts the sessions listening for the schema's events now: one per running broker
// whose listening connection is up.
func (s *Store) Listeners(ctx context.Context) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()
		AND query = $1 AND state = 'idle'`, listenStatement(s.channel)).Scan(&n)
	return n, err
}

func listenStatement(channel string) string { return `LISTEN ` + pgx.Identifier{channel}.Sanitize() }

func (s *Store) listenConn(ctx context.Context) (*pgx.Conn, error) {
	conn, err := s.connect(ctx, "listen")
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, listenStatement(s.channel)); err != nil {
		_ = conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// receive delivers notifications until the connection fails or ctx ends.
func (s *Store) receive(ctx context.Context, conn *pgx.Conn, fn func(store.Event)) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		var w wireEvent
		if err := json.Unmarshal([]byte(n.Payload), &w); err != nil || w.Kind == "" {
			s.log.Warn("ignored a notification that is not a broker event", "channel", n.Channel, "payload", n.Payload)
			continue
		}
		if w.From != s.BrokerID() {
			s.fronts.reset() // another broker's write may have made jobs ready ahead of a front
		}
		fn(store.Event(w))
	}
}

// Campaign competes for the leadership until ctx ends.
//
// The leader is the broker whose connection holds the schema's leader lock, a session advisory
// lock: PostgreSQL lets it go the moment that session ends, however the broker ended. A broker
// that does not lead tries to take it every election interval (DefaultElectionInterval). Every
// broker, leading or not, records that it is alive (its last_seen, by the database's clock) on
// that same connection as often: the leader stops leading (lead(false)) as soon as that fails
// or does not answer within half the leader timeout (see heartbeat), and before anything else
// when it runs again after being frozen (its next check finds its session ended).
//
// A frozen leader (a stopped process, a paused machine, a stall of many seconds) keeps its
// connection, and the lock, open. So a broker that fails to take the lock looks at the
// holder's last_seen: when it was not seen for the leader timeout (Options.LeaderTimeout), the
// broker ends the holder's session (pg_terminate_backend, which needs the brokers to share a
// role, or to be members of pg_signal_backend), logs it, and takes the lock. Because the
// heartbeat is written on the connection that holds the lock, a broker that keeps writing it
// holds a live session and keeps the leadership; one that cannot write it for half the leader
// timeout has let the lock go itself.
//
// Failover: after a leader process dies (a crash, SIGKILL) its machine closes the connection,
// PostgreSQL drops its session and the lock with it, and another broker leads within one
// election interval. When the leader's machine or network is lost instead, PostgreSQL holds the
// lock until it notices the session is dead (its tcp_keepalives_* settings); the old leader
// stops leading within an interval and half the leader timeout of losing the database. When the session ends on
// the database's side while the broker lives (pg_terminate_backend, a server restart), another
// broker may take the lock before the old leader's next check: both lead for at most one
// interval, which the leader's duties tolerate (store.Cluster).
func (s *Store) Campaign(ctx context.Context, lead func(leader bool)) {
	var conn *pgx.Conn
	leader := false
	stop := func(err error) {
		if conn != nil {
			_ = conn.Close(context.Background()) // lets the lock go, if the session is still there
			conn = nil
		}
		if !leader {
			return
		}
		leader = false
		if err != nil {
			s.log.Warn("lost leadership", "broker", s.BrokerID(), "err", err)
		} else {
			s.log.Info("gave up leadership", "broker", s.BrokerID())
		}
		lead(false)
	}
	defer stop(nil)
	tick := time.NewTicker(s.electionInterval)
	defer tick.Stop()
	var pruned time.Time // when this broker, leading, last forgot long-gone brokers
	cannotEnd := false   // the last round found a silent leader it could not end
	for {
		if s.campaignHook != nil {
			s.campaignHook()
		}
		if conn == nil {
			call := s.reachBegin()
			c, err := s.connect(ctx, "leader")
			call.end(ctx, err)
			if err != nil && ctx.Err() == nil {
				s.log.Warn("cannot connect to campaign for leadership; retrying", "broker", s.BrokerID(), "err", err)
			}
			conn = c
		}
		if conn != nil {
			call := s.reachBegin()
			err := s.heartbeat(ctx, conn)
			call.end(ctx, err)
			if err != nil {
				if ctx.Err() != nil {
					return // stopping, not lost
				}
				stop(err)
			}
		}
		if conn != nil && leader && time.Since(pruned) >= brokerPruneEvery {
			pruned = time.Now()
			s.pruneBrokers(ctx, conn)
		}
		if conn != nil && !leader {
			ok, err := s.tryLead(ctx, conn)
			var ended bool
			var endErr error
			if err == nil && !ok {
				ended, endErr = s.endSilentLeader(ctx, conn)
			}
			// Said once: the failure repeats every round for as long as the leader is silent.
			if endErr != nil && !cannotEnd && ctx.Err() == nil {
				s.log.Warn("cannot end the session of a silent leader", "broker", s.BrokerID(), "err", endErr)
			}
			cannotEnd = endErr != nil
			if ended {
				// The lock goes as the ended session goes, within moments.
				for range 10 {
					if ok, err = s.tryLead(ctx, conn); ok || err != nil || !sleep(ctx, s.electionInterval/10) {
						break
					}
				}
			}
			switch {
			case err != nil && ctx.Err() != nil:
				return
			case err != nil:
				stop(err)
			case ok:
				leader = true
				s.log.Info("became leader", "broker", s.BrokerID())
				lead(true)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Brokers not seen for brokerForget are forgotten, with their write receipts, by the leader,
// which looks every brokerPruneEvery. A receipt is only ever looked for within the write that
// stored it, so a broker gone this long needs none of them.
const (
	brokerForget     = 7 * 24 * time.Hour
	brokerPruneEvery = time.Hour
)

// pruneBrokers forgets the brokers not seen for brokerForget.
func (s *Store) pruneBrokers(ctx context.Context, conn *pgx.Conn) {
	// Within an interval, like everything on this connection, so the heartbeat keeps its pace.
	ctx, cancel := context.WithTimeout(ctx, s.roundBound)
	defer cancel()
	tag, err := conn.Exec(ctx, `DELETE FROM brokers WHERE last_seen < `+dbNow+` - $1`, brokerForget.Nanoseconds())
	switch {
	case err != nil && ctx.Err() == nil:
		s.log.Warn("forget brokers gone for long", "broker", s.BrokerID(), "err", err)
	case err == nil && tag.RowsAffected() > 0:
		s.log.Info("forgot brokers gone for long", "broker", s.BrokerID(), "brokers", tag.RowsAffected(), "unseen_for", brokerForget)
	}
}

// heartbeat records that the broker is alive, through conn, within half the leader timeout.
//
// Slower than an election interval is not yet lost: on a loaded database (or a loaded test
// machine) one slow answer would otherwise make the leader give the leadership up for nothing,
// and the brokers would trade it back and forth. Half the leader timeout still ends the wait
// before anyone may end the leader's session for its silence: the last heartbeat that answered
// was at most an interval before this one began, and an interval is at most a third of the
// leader timeout (Open checks), so a leader that gives up here does so before the others may
// take over.
func (s *Store) heartbeat(ctx context.Context, conn *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, s.leaderTimeout/2)
	defer cancel()
	workers := 0
	if count := s.workers.Load(); count != nil {
		workers = (*count)()
	}
	// The same statement reads the other live brokers' counts (PeerWorkers): knowing where the
	// workers are costs no statement of its own.
	rows, err := conn.Query(ctx, `WITH me AS (UPDATE brokers SET last_seen = `+dbNow+`, workers = $2 WHERE id = $1)
		SELECT id, workers FROM brokers WHERE id <> $1 AND `+dbNow+` - last_seen <= $3`,
		s.brokerID, workers, s.aliveWindow.Nanoseconds())
	if err != nil {
		return err
	}
	peers := map[string]int{}
	for rows.Next() {
		var id int64
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			rows.Close()
			return err
		}
		peers[strconv.FormatInt(id, 10)] = n
	}
	if err := rows.Err(); err != nil {
		return err
	}
	s.peers.Store(&peers)
	return nil
}

// CountWorkers gives the heartbeat the count of the broker's worker streams to write beside its
// last_seen (store.BrokerRecord.Workers), so that each broker sees where the workers are.
func (s *Store) CountWorkers(count func() int) { s.workers.Store(&count) }

// PeerWorkers are the worker streams of every other live broker (by broker id), as the last
// heartbeat read them; nil before the first.
func (s *Store) PeerWorkers() map[string]int {
	if p := s.peers.Load(); p != nil {
		return *p
	}
	return nil
}

// endSilentLeader ends the session holding the leader lock if the broker it belongs to (by its
// application_name, see connect) has not recorded that it is alive for the leader timeout, by
// the database's clock. It reports whether it ended one. One statement finds the holder,
// measures its silence and ends it, so a heartbeat that committed before it spares the holder.
// An error says it found a silent leader and could not end its session (a role without the
// right to, see docs/deploying.md), or could not look.
func (s *Store) endSilentLeader(outer context.Context, conn *pgx.Conn) (bool, error) {
	ctx, cancel := context.WithTimeout(outer, s.roundBound)
	defer cancel()
	var pid int32
	var id, silent int64
	err := conn.QueryRow(ctx, `SELECT a.pid, b.id, `+dbNow+` - b.last_seen, pg_terminate_backend(a.pid)
		FROM pg_locks l
		JOIN pg_stat_activity a ON a.pid = l.pid
		JOIN brokers b ON a.application_name = 'jobwire broker ' || b.id || ' leader'
		WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1 AND l.objsubid = 2
		AND l.objid::bigint = (`+schemaKey+`::bigint & 4294967295)
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND `+dbNow+` - b.last_seen > $2`,
		lockLeader, s.leaderTimeout.Nanoseconds()).Scan(&pid, &id, &silent, new(bool))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil // the leader is alive, or the lock is free again
	case err != nil:
		return false, err
	}
	s.log.Warn("ended the session of a silent leader to take over", "broker", s.BrokerID(),
		"leader", strconv.FormatInt(id, 10), "silent_for", time.Duration(silent).Round(time.Millisecond), "pid", pid)
	return true, nil
}

// tryLead takes the leader lock if no session holds it.
func (s *Store) tryLead(ctx context.Context, conn *pgx.Conn) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.roundBound)
	defer cancel()
	var ok bool
	err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, `+schemaKey+`)`, lockLeader).Scan(&ok)
	return ok, err
}

// sleep waits d, or until ctx ends, as the store's retries do; it reports whether it waited d.
func sleep(ctx context.Context, d time.Duration) bool {
	return storeretry.ClockSleep(clock.Real{})(ctx, d) == nil
}

// sessionName is the application_name of this broker's session for role.
func (s *Store) sessionName(role string) string { return "jobwire broker " + s.BrokerID() + " " + role }

// ReportReach makes the store tell t of its own calls that reach the database: the heartbeat
// and the connecting of the leadership connection, once an election interval, so that a broker
// hears the database is silent (or answers again) while no call of its own waits on it.
func (s *Store) ReportReach(t *reach.Tracker) { s.reach.Store(t) }

// reachCall is one of the store's own calls, told to the tracker given to ReportReach, if any.
type reachCall struct{ c *reach.Call }

func (s *Store) reachBegin() reachCall {
	t := s.reach.Load()
	if t == nil {
		return reachCall{}
	}
	c := t.Begin()
	return reachCall{c: &c}
}

// end tells the tracker how the call ended: answered (an error of the server's own is an
// answer too), abandoned when ctx (the store's caller's) ended, or else unreached.
func (r reachCall) end(ctx context.Context, err error) {
	var pgErr *pgconn.PgError
	switch {
	case r.c == nil:
	case err == nil, errors.As(err, &pgErr):
		r.c.End(reach.Answered)
	case ctx.Err() != nil:
		r.c.End(reach.Abandoned)
	default:
		r.c.End(reach.Unreached)
	}
}
