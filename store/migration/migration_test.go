package migration

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoad(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"m/010_b.up.sql": {Data: []byte("B")},
		"m/002_a.up.sql": {Data: []byte("A")},
	}
	ms, err := Load(fsys, "m")
	if err != nil || len(ms) != 2 || ms[0].Version != 2 || ms[1].Name != "010_b.up.sql" || ms[1].SQL != "B" {
		t.Fatalf("Load = %+v, %v; want 002 then 010", ms, err)
	}
	for name, bad := range map[string]fstest.MapFS{
		"same number":  {"m/003_a.up.sql": {}, "m/003_b.up.sql": {}},
		"no number":    {"m/init.up.sql": {}},
		"not a number": {"m/x1_init.up.sql": {}},
	} {
		if _, err := Load(bad, "m"); err == nil || !strings.Contains(err.Error(), "migration") {
			t.Errorf("%s: Load = %v, want an error naming the migration", name, err)
		}
	}
}
