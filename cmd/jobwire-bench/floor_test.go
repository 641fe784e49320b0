package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
)

// TestMain runs the floor server when this test binary is started as one (roundTripFloors runs
// its own executable with floorServerCommand), and the tests otherwise.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == floorServerCommand {
		if err := runFloorServer(context.Background()); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Every floor is measured, the round trips against a server in another process, and the
// summary bounds a lone producer on each store measured: SQLite always, PostgreSQL where the
// tests have a database (JOBWIRE_TEST_POSTGRES).
func TestFloorMeasuresEveryFloor(t *testing.T) {
	const n = 20
	pg := os.Getenv("JOBWIRE_TEST_POSTGRES")
	rows, err := measureFloors(context.Background(), n, "normal", pg)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{floorTCP, floorUnary, floorStream, floorSQLite + " (normal)"}
	stores := []string{"SQLite"}
	if pg != "" {
		want = append(want, floorPGPing, floorPGAuto, floorPGBatch)
		stores = append(stores, "PostgreSQL")
	}
	if len(rows) != len(want) {
		t.Fatalf("%d floors, want %d (%q)", len(rows), len(want), want)
	}
	for i, r := range rows {
		if r.what != want[i] {
			t.Errorf("floor %d is %q, want %q", i, r.what, want[i])
		}
		if len(r.samples) != n {
			t.Errorf("%s: %d samples, want %d", r.what, len(r.samples), n)
		}
		if r.p(50) <= 0 || r.p(50) > r.p(99) {
			t.Errorf("%s: p50 %v, p99 %v", r.what, r.p(50), r.p(99))
		}
	}
	var out bytes.Buffer
	printFloors(&out, rows)
	for _, s := range stores {
		if !strings.Contains(out.String(), "  "+s+" ") {
			t.Errorf("the summary bounds no lone producer on %s:\n%s", s, out.String())
		}
	}
}

// A bad command line is a usage error (exit status 2), with a sentence saying what is wrong.
func TestFloorRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-n", "0"}, {"--durability", "off"}, {"--no-such-flag"}} {
		if err := runFloor(context.Background(), args); !errors.Is(err, errUsage) {
			t.Errorf("floor %q: %v, want a usage error", args, err)
		}
	}
}
