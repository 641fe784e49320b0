// Package migration reads a store's schema migrations: numbered SQL files NNN_name.up.sql,
// embedded in the store's binary and applied in order, each once.
package migration

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Migration is one schema change.
type Migration struct {
	Version int
	Name    string // the file name
	SQL     string
}

// Load reads the migrations in dir of fsys, in version order. Two files with one number are an
// error: changes made side by side can pick the same next number, and the second would then
// never run on a database that already has the first.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("migration %q: name must be NNN_name.up.sql", name)
		}
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %q: name must start with a number", name)
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("migrations %s and %s share the number %d: renumber one", out[i-1].Name, out[i].Name, out[i].Version)
		}
	}
	return out, nil
}

// Apply runs apply, which must apply a migration together with its row in the store's
// schema_migrations, for each of ms newer than current and no newer than last, in order. Each one
// applied is logged with its duration: some read every job once, which on a large database holds
// up the start. It returns the names of those it applied, the last one failed excepted.
func Apply(ctx context.Context, ms []Migration, current, last int, log *slog.Logger, apply func(context.Context, Migration) error) (applied []string, err error) {
	for _, m := range ms {
		if m.Version <= current || m.Version > last {
			continue
		}
		start := time.Now()
		if err := apply(ctx, m); err != nil {
			return applied, fmt.Errorf("migration %s: %w", m.Name, err)
		}
		applied = append(applied, m.Name)
		log.Info("applied storage migration", "migration", m.Name, "took", time.Since(start).Round(time.Millisecond))
	}
	return applied, nil
}
