package storetest

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

var _ = register(
	testCase{"BreakerLockAndGet", testBreakerLockAndGet},
	testCase{"BreakerLockSerializes", testBreakerLockSerializes},
	testCase{"SuccessAnsweredByTheBreakerLock", testSuccessAnsweredByTheBreakerLock},
	testCase{"BreakerSaveIf", testBreakerSaveIf},
)

// BreakerSaveIf stores a breaker still stored as the writer saw it, with the successes it
// counts stored; a breaker changed since, or a success counted that is not stored, fails the
// whole transaction and leaves the row as it was.
func testBreakerSaveIf(t *testing.T, b *bundle) {
	b.write(func(tx store.Tx) error {
		return tx.BreakerSave(store.BreakerRecord{Type: "t", Data: []byte(`{"v":1}`)})
	})
	b.insert(b.job("t"), b.job("t"))
	ref := b.leaseOne("t")
	other := b.leaseOne("t")
	b.write(func(tx store.Tx) error {
		if err := tx.JobSucceedManyAtCommit([]*store.JobFinishParams{b.finishParams(ref, job.StateSucceeded)},
			func([]bool, error) {}); err != nil {
			return err
		}
		return tx.BreakerSaveIf(store.BreakerRecord{Type: "t", Data: []byte(`{"v":2}`), Shut: true}, []byte(`{"v":1}`), []job.LeaseRef{ref})
	})
	want := []store.BreakerRecord{{Type: "t", Data: []byte(`{"v":2}`), Shut: true}}
	for _, c := range []struct {
		name      string
		stored    []byte
		succeeded []job.LeaseRef
	}{
		{"a breaker changed since", []byte(`{"v":1}`), []job.LeaseRef{ref}},
		{"a success counted that is not stored", []byte(`{"v":2}`), []job.LeaseRef{ref, other}},
	} {
		err := b.s.Write(b.ctx, "test", func(tx store.Tx) error {
			if err := tx.BreakerSave(store.BreakerRecord{Type: "u", Data: []byte(`{}`)}); err != nil {
				return err
			}
			return tx.BreakerSaveIf(store.BreakerRecord{Type: "t", Data: []byte(`{"v":3}`)}, c.stored, c.succeeded)
		})
		if err == nil {
			t.Errorf("BreakerSaveIf of %s: the write went through", c.name)
		}
		b.write(func(tx store.Tx) error {
			got, err := tx.BreakerGet([]string{"t", "u"})
			equal(t, "breakers after BreakerSaveIf of "+c.name, got, want)
			return err
		})
	}
}

// A success stored at commit (JobSucceedManyAtCommit) is answered by the time the
// transaction's next read returns, BreakerLock here: the broker counts a success in its
// breaker only once it knows it applied, and asks after locking the breaker. A stale success's
// answer is there too.
func testSuccessAnsweredByTheBreakerLock(t *testing.T, b *bundle) {
	b.insert(b.job("t"))
	ref := b.leaseOne("t")
	stale := ref
	stale.Token.Seq++
	var applied []bool
	calls := 0
	b.write(func(tx store.Tx) error {
		err := tx.JobSucceedManyAtCommit([]*store.JobFinishParams{b.finishParams(ref, job.StateSucceeded),
			b.finishParams(stale, job.StateSucceeded)}, func(a []bool, err error) {
			applied, calls = a, calls+1
			if err != nil {
				t.Errorf("JobSucceedManyAtCommit: %v", err)
			}
		})
		if err != nil {
			return err
		}
		if _, err := tx.BreakerLock("t", []byte(`{}`)); err != nil {
			return err
		}
		if calls != 1 || !slices.Equal(applied, []bool{true, false}) {
			t.Errorf("after BreakerLock returned, JobSucceedManyAtCommit's got was called %d times with %v, want once with [true false]",
				calls, applied)
		}
		return nil
	})
	if calls != 1 {
		t.Fatalf("JobSucceedManyAtCommit called got %d times, want once", calls)
	}
}

// BreakerLock stores the initial state of a type with none and reads a stored one; BreakerGet
// and BreakerLoadAll read the asked types that have a state, shut or not as last saved, and
// BreakerShutAtCommit the shut ones.
func testBreakerLockAndGet(t *testing.T, b *bundle) {
	b.write(func(tx store.Tx) error {
		got, err := tx.BreakerGet([]string{"a", "b"})
		if err != nil || len(got) != 0 {
			t.Errorf("BreakerGet of an empty store: %v, %v", got, err)
		}
		data, err := tx.BreakerLock("a", []byte(`{"init":1}`))
		if err != nil {
			return err
		}
		equal(t, "BreakerLock of a type with no state", string(data), `{"init":1}`)
		if err := tx.BreakerSave(store.BreakerRecord{Type: "b", Data: []byte(`{"b":1}`), Shut: true}); err != nil {
			return err
		}
		data, err = tx.BreakerLock("b", []byte(`{"init":1}`))
		equal(t, "BreakerLock of a stored type", string(data), `{"b":1}`)
		return err
	})
	b.write(func(tx store.Tx) error {
		got, err := tx.BreakerGet([]string{"c", "b", "a"})
		equal(t, "BreakerGet", got, []store.BreakerRecord{{Type: "a", Data: []byte(`{"init":1}`)}, {Type: "b", Data: []byte(`{"b":1}`), Shut: true}})
		if err != nil {
			return err
		}
		got, err = tx.BreakerGet(nil)
		if len(got) != 0 {
			t.Errorf("BreakerGet(nil) = %v", got)
		}
		return err
	})
	b.write(func(tx store.Tx) error {
		return tx.BreakerSave(store.BreakerRecord{Type: "a", Data: []byte(`{"a":2}`), Shut: true})
	})
	b.write(func(tx store.Tx) error {
		return tx.BreakerSave(store.BreakerRecord{Type: "b", Data: []byte(`{"b":2}`)})
	})
	all, err := b.s.BreakerLoadAll(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "BreakerLoadAll after saving again", all,
		[]store.BreakerRecord{{Type: "a", Data: []byte(`{"a":2}`), Shut: true}, {Type: "b", Data: []byte(`{"b":2}`)}})
	// BreakerShutAtCommit reads the shut ones among the asked types, and no other shut one.
	var shut []store.BreakerRecord
	calls := 0
	b.write(func(tx store.Tx) error {
		if err := tx.BreakerSave(store.BreakerRecord{Type: "d", Data: []byte(`{"d":1}`), Shut: true}); err != nil {
			return err
		}
		return tx.BreakerShutAtCommit([]string{"c", "b", "a"}, func(recs []store.BreakerRecord, err error) {
			shut, calls = recs, calls+1
			if err != nil {
				t.Errorf("BreakerShutAtCommit: %v", err)
			}
		})
	})
	if calls != 1 {
		t.Fatalf("BreakerShutAtCommit called got %d times, want once", calls)
	}
	equal(t, "BreakerShutAtCommit", shut, []store.BreakerRecord{{Type: "a", Data: []byte(`{"a":2}`), Shut: true}})
}

// Writes that read a breaker with BreakerLock and store it changed never lose one another's
// change, however many run at once: this is what keeps a breaker several brokers share exact.
func testBreakerLockSerializes(t *testing.T, b *bundle) {
	const writers, each = 4, 10
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				err := b.s.Write(b.ctx, "storetest", func(tx store.Tx) error {
					data, err := tx.BreakerLock("count", []byte("0"))
					if err != nil {
						return err
					}
					n, err := strconv.Atoi(string(data))
					if err != nil {
						return err
					}
					return tx.BreakerSave(store.BreakerRecord{Type: "count", Data: []byte(strconv.Itoa(n + 1))})
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	got, err := b.s.BreakerLoadAll(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "counter after concurrent locked increments", got, []store.BreakerRecord{{Type: "count", Data: []byte(strconv.Itoa(writers * each))}})
}

// OldBreakerStates are breaker documents by type as they were stored before breakers had a shut
// mark, one in each state. A store's migration test stores them in its old schema, migrates,
// and checks them with WantShutFromState.
var OldBreakerStates = map[string]string{"closed": `{"State":1}`, "open": `{"State":2}`, "half": `{"State":3,"Generation":4}`}

// WantShutFromState fails t unless s holds the breakers of OldBreakerStates, each shut as its
// document's state says: every state but CLOSED (1) holds its type back.
func WantShutFromState(t *testing.T, s store.Store) {
	t.Helper()
	recs, err := s.BreakerLoadAll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	shut := map[string]bool{}
	for _, r := range recs {
		shut[r.Type] = r.Shut
	}
	equal(t, "shut after the migration", shut, map[string]bool{"closed": false, "open": true, "half": true})
}
