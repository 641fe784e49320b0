package app_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/jobwire/jobwire/store/sqlite"
)

// A second broker on the same SQLite file refuses to start, naming the first; once the first
// stops, a broker starts on the file again.
func TestSecondBrokerOnOneSQLiteFileRefusesToStart(t *testing.T) {
	db := filepath.Join(t.TempDir(), "jobwire.db")
	start := func(ctx context.Context) (addr string, done chan error) { return startBroker(ctx, db) }

	ctx1, stop1 := context.WithCancel(context.Background())
	defer stop1()
	addr1, done1 := start(ctx1)
	if addr1 == "" {
		t.Fatalf("first broker did not start: %v", <-done1)
	}

	addr2, done2 := start(context.Background())
	if addr2 != "" {
		t.Fatalf("second broker started on %s beside the first", addr2)
	}
	err := <-done2
	var inUse *sqlite.InUseError
	if !errors.As(err, &inUse) || inUse.Addr != addr1 || inUse.DB != db {
		t.Fatalf("second broker: got %v, want InUseError naming %s and %s", err, db, addr1)
	}

	stop1()
	if err := <-done1; err != nil {
		t.Fatalf("first broker: %v", err)
	}
	ctx3, stop3 := context.WithCancel(context.Background())
	addr3, done3 := start(ctx3)
	if addr3 == "" {
		t.Fatalf("broker after the first stopped: %v", <-done3)
	}
	stop3()
	if err := <-done3; err != nil {
		t.Fatal(err)
	}
}
