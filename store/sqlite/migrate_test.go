package sqlite

import "testing"

// Every embedded migration has its own number; a shared number would leave one of the two
// unapplied on databases that already ran the other.
func TestMigrationNumbersAreUnique(t *testing.T) {
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		if m.version != i+1 {
			t.Fatalf("migration %s has number %d, want %d: numbers run 1, 2, 3 ... without gaps", m.name, m.version, i+1)
		}
	}
}
