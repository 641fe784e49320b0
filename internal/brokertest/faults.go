package brokertest

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/sqlite"
	"github.com/jobwire/jobwire/store/storeretry"
	sqlite3 "modernc.org/sqlite/lib"
)

// Phase is where in a storage write a fault is injected.
type Phase int

const (
	// FaultBefore fails a try with SQLITE_BUSY before its transaction begins.
	FaultBefore Phase = iota + 1
	// FaultInside runs the transaction's statements, then fails with SQLITE_BUSY before the
	// commit, so everything the try wrote is rolled back.
	FaultInside
	// FaultAfterCommit commits the try and then reports SQLITE_BUSY anyway: the ambiguous
	// failure of a commit whose acknowledgement was lost. The retry policy runs the write again.
	FaultAfterCommit
)

func (p Phase) String() string {
	switch p {
	case FaultBefore:
		return "before"
	case FaultInside:
		return "inside"
	case FaultAfterCommit:
		return "after-commit"
	}
	return fmt.Sprintf("Phase(%d)", int(p))
}

// BusyFault is the SQLITE_BUSY that Faults injects. It carries the real result code, so
// sqlite.Classify treats it exactly like the driver's error.
type BusyFault struct{}

func (BusyFault) Error() string { return "injected: database is locked (SQLITE_BUSY)" }

// Code is the SQLite result code.
func (BusyFault) Code() int { return sqlite3.SQLITE_BUSY }

// Faults injects storage faults into named write operations ("enqueue", "start", "batch"...,
// the op names the broker passes to store.Write) of a broker started with Options.Faults. It
// runs the real storage retry policy, so every injected fault is retried (and counted) as a
// real SQLITE_BUSY would be.
type Faults struct {
	policy *storeretry.Policy

	mu       sync.Mutex
	plan     []*planned               // faults still to inject
	each     map[string]map[Phase]int // tries of every call of an op that fail, per phase
	calls    map[string]int           // tries of each op
	injected int64
	holds    map[string]*hold
	code     int // the injected result code; 0 means SQLITE_BUSY
}

// planned is n faults of one phase, for the next tries of any of ops.
type planned struct {
	ops   map[string]bool
	phase Phase
	n     int
}

// hold keeps the next try of an op waiting until it is let go.
type hold struct {
	entered chan struct{}
	release chan struct{}
}

// NewFaults returns an injector that injects nothing until told to (Inject), retrying with
// opts (at least one retry) and no wait between tries.
func NewFaults(t testing.TB, opts storeretry.Options) *Faults {
	t.Helper()
	p, err := storeretry.New(storeretry.Config{Classify: sqlite.Classify, Logger: slog.New(slog.DiscardHandler), Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	return NewFaultsWithPolicy(p)
}

// NewFaultsWithPolicy is NewFaults with a policy of the test's own, e.g. one that waits
// between tries on a clock the test controls.
func NewFaultsWithPolicy(p *storeretry.Policy) *Faults {
	return &Faults{policy: p, each: map[string]map[Phase]int{}, calls: map[string]int{}, holds: map[string]*hold{}}
}

// FailWith makes the injected faults carry SQLite result code code instead of SQLITE_BUSY,
// classified like the driver's own error of that code (SQLITE_IOERR_WRITE, SQLITE_READONLY...).
func (f *Faults) FailWith(code int) {
	f.mu.Lock()
	f.code = code
	f.mu.Unlock()
}

// fault is the error an injected fault returns.
func (f *Faults) fault() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.code == 0 {
		return BusyFault{}
	}
	return codeFault(f.code)
}

// codeFault is an injected SQLite result code other than SQLITE_BUSY.
type codeFault int

func (c codeFault) Error() string { return "injected: " + sqlite.CodeName(int(c)) }

// Code is the SQLite result code.
func (c codeFault) Code() int { return int(c) }

// DefaultFaultRetries are the retry options of NewFaults's usual caller: three retries, one
// minute per try.
var DefaultFaultRetries = storeretry.Options{MaxTransientRetries: 3, CommandTimeout: time.Minute}

// Inject makes the next n tries of any of ops fail in phase: n faults in all, shared by ops.
// Several names let a test fault a write whatever commit it joins: one of its own ("promote")
// or one shared with other writes ("batch").
func (f *Faults) Inject(phase Phase, n int, ops ...string) {
	p := &planned{ops: map[string]bool{}, phase: phase, n: n}
	for _, op := range ops {
		p.ops[op] = true
	}
	f.mu.Lock()
	f.plan = append(f.plan, p)
	f.mu.Unlock()
}

// InjectEveryCall makes the first n tries of every call of each of ops fail in phase, for as
// long as the broker runs.
func (f *Faults) InjectEveryCall(phase Phase, n int, ops ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, op := range ops {
		if f.each[op] == nil {
			f.each[op] = map[Phase]int{}
		}
		f.each[op][phase] = n
	}
}

// Hold makes the next try of op wait, before its transaction begins, until release is called.
// entered is closed once the try waits: the broker's writer is then blocked, and ops submitted
// meanwhile are committed together in the next batch.
func (f *Faults) Hold(op string) (entered <-chan struct{}, release func()) {
	h := &hold{entered: make(chan struct{}), release: make(chan struct{})}
	f.mu.Lock()
	f.holds[op] = h
	f.mu.Unlock()
	var once sync.Once
	return h.entered, func() { once.Do(func() { close(h.release) }) }
}

// take reports whether a fault of phase is due for try (counted from 1) of a call of op, and
// counts it.
func (f *Faults) take(op string, phase Phase, try int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if try <= f.each[op][phase] {
		f.injected++
		return true
	}
	for _, p := range f.plan {
		if p.phase == phase && p.n > 0 && p.ops[op] {
			p.n--
			f.injected++
			return true
		}
	}
	return false
}

// Do is the sqlite.Retrier: the real policy, with faults before and after the transaction.
func (f *Faults) Do(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	try := 0
	return f.policy.Do(ctx, op, func(ctx context.Context) error {
		try++
		f.mu.Lock()
		f.calls[op]++
		h := f.holds[op]
		delete(f.holds, op)
		f.mu.Unlock()
		if h != nil {
			close(h.entered)
			<-h.release
		}
		if f.take(op, FaultBefore, try) {
			return f.fault()
		}
		if err := fn(ctx); err != nil {
			return err
		}
		if f.take(op, FaultAfterCommit, try) {
			return f.fault()
		}
		return nil
	})
}

// Counters lets the store report the policy's counters through StorageRetries.
func (f *Faults) Counters() map[string]int64 { return f.policy.Counters() }

// Tries is how many times op was tried.
func (f *Faults) Tries(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// Injected is how many faults were injected.
func (f *Faults) Injected() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.injected
}

// Pending is how many planned faults were not injected yet.
func (f *Faults) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, p := range f.plan {
		n += p.n
	}
	return n
}

// faultStore is the store the broker gets: the store, with faults inside its write
// transactions.
type faultStore struct {
	Store
	f *Faults
}

func (s faultStore) Write(ctx context.Context, op string, fn func(tx store.Tx) error) error {
	try := 0
	return s.Store.Write(ctx, op, func(tx store.Tx) error {
		try++
		if err := fn(tx); err != nil {
			return err
		}
		if s.f.take(op, FaultInside, try) {
			return s.f.fault()
		}
		return nil
	})
}
