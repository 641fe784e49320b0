package app

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/config"
	"github.com/jobwire/jobwire/store/sqlite"
)

// TestBootstrapWarnsInsideAGitWorkTree: the first admin token written under a directory holding
// .git (a checkout, where `git add .` would take it) gets a warning naming the work tree; one
// written elsewhere does not.
func TestBootstrapWarnsInsideAGitWorkTree(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		git      string // "dir", "file" (a linked work tree) or "" (none)
		wantWarn bool
	}{
		{"in a checkout", "dir", true},
		{"in a linked work tree", "file", true},
		{"outside any", "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			top := t.TempDir()
			switch tt.git {
			case "dir":
				if err := os.Mkdir(filepath.Join(top, ".git"), 0o755); err != nil {
					t.Fatal(err)
				}
			case "file":
				if err := os.WriteFile(filepath.Join(top, ".git"), []byte("gitdir: elsewhere\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			data := filepath.Join(top, "var", "data")
			if err := os.MkdirAll(data, 0o755); err != nil {
				t.Fatal(err)
			}
			if tt.git == "" && exec.Command("git", "-C", top, "rev-parse", "--is-inside-work-tree").Run() == nil {
				t.Skip("the temporary directory itself lies inside a git work tree")
			}
			cfg := config.Defaults()
			cfg.DB = filepath.Join(data, "jobwire.db")
			st, err := sqlite.Open(t.Context(), cfg.DB, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			if err := bootstrap(context.Background(), auth.New(auth.Options{Store: st}), cfg, log); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(cfg.DB + ".admin-token"); err != nil {
				t.Fatalf("no admin token file: %v\n%s", err, logs.String())
			}
			warned := strings.Contains(logs.String(), "inside a git work tree")
			if warned != tt.wantWarn {
				t.Fatalf("warned about the git work tree: %v, want %v; logs:\n%s", warned, tt.wantWarn, logs.String())
			}
			if warned && !strings.Contains(logs.String(), "work_tree="+top) {
				t.Errorf("the warning does not name the work tree %s:\n%s", top, logs.String())
			}
		})
	}
}

// TestGitIgnoresWhatTheBrokerWritesBesideItsDatabase: a broker run in a checkout writes the
// database, its lock file and, with auth on, the bootstrap admin token there; none may end up
// in a commit.
func TestGitIgnoresWhatTheBrokerWritesBesideItsDatabase(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not on PATH")
	}
	root := filepath.Join("..", "..")
	for _, name := range []string{"jobwire.db", "jobwire.db-wal", "jobwire.db.lock", "jobwire.db.admin-token", "jobwire.admin-token", "data/broker.db.admin-token"} {
		cmd := exec.Command("git", "check-ignore", "--quiet", "--no-index", name)
		cmd.Dir = root
		if err := cmd.Run(); err != nil {
			t.Errorf("git check-ignore %s: %v; .gitignore must cover it", name, err)
		}
	}
}
