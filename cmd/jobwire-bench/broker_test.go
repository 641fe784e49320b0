package main

import (
	"errors"
	"testing"
)

// A repeated scenario gets a database of its own each time: with --worker-cmd the drain is
// followed through the broker's counts, and the jobs of the run before would count.
func TestEachRunOfAScenarioHasAFreshSQLiteDatabase(t *testing.T) {
	dir := t.TempDir()
	cfg := &benchConfig{}
	first, dropFirst, err := scenarioDB(t.Context(), cfg, dir, "drain")
	if err != nil {
		t.Fatal(err)
	}
	second, dropSecond, err := scenarioDB(t.Context(), cfg, dir, "drain")
	if err != nil {
		t.Fatal(err)
	}
	if first == second {
		t.Fatalf("two runs of one scenario share the database %s", first)
	}
	if err := errors.Join(dropFirst(), dropSecond()); err != nil {
		t.Fatal(err)
	}
}
