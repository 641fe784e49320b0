package broker

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/internal/service"
	"github.com/jobwire/jobwire/store"
)

// breakerSaveDelay is how long a breaker's failures counted while CLOSED may wait to be
// stored: a crash forgets at most this much of them. Saving them together, not one write per
// failed attempt, keeps the writes few exactly when a dependency is failing.
const breakerSaveDelay = time.Second

// breakerKeeper stores breaker states as they change, so that a restart does not slam a
// dependency that was just found broken, and refreshes the cache of shared breakers when
// another broker changed them (breakersStale). It writes straight to the store, not through
// the writer: it outlives the writer at shutdown, to store the last states.
//
// Transitions are stored as they happen. Failures counted while CLOSED change no state; they
// are stored together, at most breakerSaveDelay after the first of them (noteFailure), and at
// the stop, when every breaker's snapshot is written. A crash therefore forgets at most the
// last second of them.
type breakerKeeper struct {
	service.Base
	cfg breakerKeeperConfig

	dirty chan struct{} // states wait in pending
	stale chan struct{} // shared breakers changed elsewhere: refresh the cache
	stop  chan struct{}

	mu      sync.Mutex
	pending map[string]breaker.Saved // latest state per type, not yet stored
	failed  map[string]bool          // types with a failure since their breaker was last saved
	save    clock.Timer              // saves failed's breakers; nil when none waits

	// Stored is sent the states each write stored (tests).
	Stored service.Signal[[]store.BreakerRecord]
}

// breakerKeeperConfig is what the keeper needs of the broker.
type breakerKeeperConfig struct {
	st  store.Store
	clk clock.Clock
	log *slog.Logger
	// snapshot reads every breaker's state.
	snapshot func() []breaker.Saved
	encode   func(breaker.Saved) (store.BreakerRecord, error)
	// shared says the breakers live in the database (a cluster): the set is then a cache,
	// refreshed by refresh, and its snapshot is never stored over newer states.
	shared  func() bool
	refresh func(ctx context.Context) error
}

func newBreakerKeeper(cfg breakerKeeperConfig) *breakerKeeper {
	k := &breakerKeeper{cfg: cfg,
		dirty: make(chan struct{}, 1), stale: make(chan struct{}, 1), stop: make(chan struct{}),
		pending: make(map[string]breaker.Saved), failed: make(map[string]bool)}
	k.OnStop(func() {
		k.mu.Lock()
		if k.save != nil {
			k.save.Stop() // the final snapshot stores every breaker
		}
		k.mu.Unlock()
		close(k.stop)
	})
	return k
}

// Start runs the loop that stores and refreshes, until Stop; ctx serves the refreshes.
func (k *breakerKeeper) Start(ctx context.Context) error {
	if err := k.Base.Start(ctx); err != nil {
		return err
	}
	k.Go(func() { k.loop(ctx) })
	return nil
}

func (k *breakerKeeper) loop(ctx context.Context) {
	for {
		select {
		case <-k.dirty:
			k.persist()
		case <-k.stale:
			if err := k.cfg.refresh(ctx); err != nil {
				k.cfg.log.Warn("refresh shared breakers", "err", err)
			}
		case <-k.stop:
			if !k.cfg.shared() { // a cache's snapshot would overwrite newer stored states
				k.queue(k.cfg.snapshot())
			}
			k.persist()
			return
		}
	}
}

// noteFailure schedules a save of typ's breaker within breakerSaveDelay.
func (k *breakerKeeper) noteFailure(typ string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.Running() {
		return // the stop stores every breaker
	}
	k.failed[typ] = true
	if k.save == nil {
		k.save = k.cfg.clk.AfterFunc(breakerSaveDelay, k.saveFailed)
	}
}

// saveFailed queues the current state of every breaker that counted a failure since it was
// last saved.
func (k *breakerKeeper) saveFailed() {
	k.mu.Lock()
	failed := k.failed
	k.failed = make(map[string]bool)
	k.save = nil
	k.mu.Unlock()
	snap := k.cfg.snapshot()
	k.queue(slices.DeleteFunc(snap, func(s breaker.Saved) bool { return !failed[s.Type] }))
}

// queue hands breaker states to the loop. A state replaces any older one of its type still
// waiting.
func (k *breakerKeeper) queue(states []breaker.Saved) {
	if len(states) == 0 {
		return
	}
	k.mu.Lock()
	for _, s := range states {
		k.pending[s.Type] = s
	}
	k.mu.Unlock()
	select {
	case k.dirty <- struct{}{}:
	default:
	}
}

// breakersStale asks for the cache of shared breakers to be refreshed soon, off the caller's
// goroutine; requests made before the refresh starts are served by one.
func (k *breakerKeeper) breakersStale() {
	select {
	case k.stale <- struct{}{}:
	default:
	}
}

func (k *breakerKeeper) persist() {
	k.mu.Lock()
	pending := k.pending
	k.pending = make(map[string]breaker.Saved)
	k.mu.Unlock()
	if len(pending) == 0 {
		return
	}
	recs := make([]store.BreakerRecord, 0, len(pending))
	for _, saved := range pending {
		rec, err := k.cfg.encode(saved)
		if err != nil {
			k.cfg.log.Error("store breaker state", "err", err)
			continue
		}
		recs = append(recs, rec)
	}
	// Not canceled by a stop: the last states are stored as the broker stops.
	err := k.cfg.st.Write(context.Background(), "breaker_save", func(tx store.Tx) error {
		for _, r := range recs {
			if err := tx.BreakerSave(r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		k.cfg.log.Error("store breaker states", "err", err)
		return
	}
	k.Stored.Send(recs)
}
