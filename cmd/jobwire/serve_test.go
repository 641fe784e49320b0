package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/config"
	"github.com/jobwire/jobwire/store/storeretry"
)

// runServeLine runs "jobwire serve" with args and environ, with a deadline: a case that wrongly
// passed validation would serve until then and exit 0.
func runServeLine(t *testing.T, environ map[string]string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	e := &env{stdout: &stdout, stderr: &stderr, getenv: func(k string) string { return environ[k] }, now: time.Now}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	code := e.run(ctx, append([]string{"serve"}, args...))
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

func TestServeRejectsBadInputBeforeTouchingTheDisk(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = busy.Close() })
	scratch := t.TempDir()
	badConfig := filepath.Join(scratch, "jobwire.yaml")
	if err := os.WriteFile(badConfig, []byte("listen: 127.0.0.1:0\nretyr: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		environ map[string]string
		want    string
	}{
		{"listen without port", []string{"--listen", "127.0.0.1"}, nil, `--listen "127.0.0.1" is not host:port`},
		{"listen port out of range", []string{"--listen", "127.0.0.1:70000"}, nil, `port "70000" is not a number in 0..65535`},
		{"listen as a URL", []string{"--listen", "http://127.0.0.1:7070"}, nil, "is not host:port"},
		{"listen from the environment", nil, map[string]string{"JOBWIRE_LISTEN": "nope"}, `JOBWIRE_LISTEN "nope" is not host:port`},
		{"listen address in use", []string{"--listen", busy.Addr().String()}, nil, "cannot listen on " + busy.Addr().String() + ": address already in use; choose another --listen"},
		{"db directory missing", []string{"--db", filepath.Join(scratch, "missing", "j.db")}, nil, `directory "` + filepath.Join(scratch, "missing") + `" does not exist; create it first`},
		{"db is a directory", []string{"--db", scratch}, nil, "is a directory; give a file path"},
		{"db an unreadable PostgreSQL URL", []string{"--db", "postgres://a b@:x"}, nil, "--db is not a PostgreSQL URL that can be read, e.g. postgres://"},
		{"db a MySQL URL", []string{"--db", "mysql://jobwire@db.example/jobwire"}, nil,
			`--db "mysql://jobwire@db.example/jobwire" is a mysql:// URL, which Jobwire does not support; give a SQLite file path such as ./jobwire.db or a postgres:// (or postgresql://) URL`},
		{"db a URL from the environment", nil, map[string]string{"JOBWIRE_DB": "sqlite:///var/lib/jobwire.db"}, `JOBWIRE_DB "sqlite:///var/lib/jobwire.db" is a sqlite:// URL`},
		{"retries not a number", []string{"--max-transient-retries", "many"}, nil, `invalid value "many" for flag --max-transient-retries: must be a whole number, zero or more`},
		{"retries negative", []string{"--max-transient-retries=-1"}, nil, "--max-transient-retries: must be a whole number, zero or more"},
		{"retries from the environment", nil, map[string]string{"JOBWIRE_MAX_TRANSIENT_RETRIES": "x"}, `JOBWIRE_MAX_TRANSIENT_RETRIES="x": must be a whole number`},
		{"base delay not a duration", []string{"--transient-retry-base-delay", "soon"}, nil, `invalid value "soon" for flag --transient-retry-base-delay: must be a duration such as 200ms`},
		{"base delay negative", []string{"--transient-retry-base-delay=-5ms"}, nil, "--transient-retry-base-delay: must be a duration"},
		{"command timeout zero", []string{"--command-timeout", "0s"}, nil, "--command-timeout must be positive, got 0s"},
		{"command timeout without unit", []string{"--command-timeout", "30"}, nil, `invalid value "30" for flag --command-timeout: must be a duration`},
		{"leader timeout too short", []string{"--db", "postgres://jobwire@127.0.0.1:1/jobwire", "--leader-timeout", "1s"}, nil,
			"--leader-timeout must be at least 3s (three election intervals), got 1s"},
		{"leader timeout from the environment", []string{"--db", "postgres://jobwire@127.0.0.1:1/jobwire"},
			map[string]string{"JOBWIRE_LEADER_TIMEOUT": "2s"}, "JOBWIRE_LEADER_TIMEOUT must be at least 3s"},
		{"leader timeout with SQLite", []string{"--leader-timeout", "10s"}, nil,
			"a leader timeout applies only to several brokers on a PostgreSQL database;"},
		{"durability", []string{"--durability", "fast"}, nil, `--durability must be normal or full, got "fast"`},
		{"log level", []string{"--log-level", "loud"}, nil, `--log-level must be debug, info, warn or error, got "loud"`},
		{"config with an unknown key", []string{"--config", badConfig}, nil, "jobwire serve: " + badConfig + ` line 2: unknown key "retyr" (did you mean "retry"?)` + "\n"},
		{"config missing", []string{"--config", filepath.Join(scratch, "nope.yaml")}, nil, "nope.yaml: no such file or directory"},
		{"stray argument", []string{"now"}, nil, `serve takes no arguments, got "now"`},
		{"http listen without port", []string{"--http-listen", "localhost"}, nil, `--http-listen "localhost" is not host:port, e.g. 127.0.0.1:7070 or :7070, or off`},
		{"http listen from the environment", nil, map[string]string{"JOBWIRE_HTTP_LISTEN": "nope"}, `JOBWIRE_HTTP_LISTEN "nope" is not host:port`},
		{"http listen address in use", []string{"--http-listen", busy.Addr().String()}, nil, "cannot listen on " + busy.Addr().String() + " for HTTP: address already in use; choose another --http-listen, or off"},
		{"metrics neither on nor off", []string{"--metrics", "yes"}, nil, `--metrics must be on or off, got "yes"`},
		{"allowed host with a port", []string{"--http-allowed-hosts", "jobwire.example.com,proxy:8080"}, nil,
			`--http-allowed-hosts: each entry must be a host name without a port, such as jobwire.example.com or *.example.com, got "proxy:8080"`},
		{"allowed hosts from the environment", nil, map[string]string{"JOBWIRE_HTTP_ALLOWED_HOSTS": "a.example,"}, `JOBWIRE_HTTP_ALLOWED_HOSTS: each entry must be a host name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := filepath.Join(t.TempDir(), "j.db")
			args := tt.args
			if !strings.Contains(strings.Join(args, " "), "--db") && tt.environ["JOBWIRE_DB"] == "" {
				args = append([]string{"--db", db}, args...)
			}
			if tt.environ["JOBWIRE_LISTEN"] == "" && !strings.Contains(strings.Join(args, " "), "--listen") {
				args = append([]string{"--listen", "127.0.0.1:0"}, args...)
			}
			r := runServeLine(t, tt.environ, args...)
			if r.code != 2 {
				t.Fatalf("exit %d, want 2; stderr: %s", r.code, r.stderr)
			}
			if !strings.Contains(r.stderr, tt.want) {
				t.Errorf("stderr %q does not contain %q", r.stderr, tt.want)
			}
			if n := strings.Count(strings.TrimSpace(r.stderr), "\n"); n != 0 {
				t.Errorf("stderr has %d extra lines, want one sentence: %q", n, r.stderr)
			}
			if _, err := os.Stat(db); !os.IsNotExist(err) {
				t.Errorf("the database %s was created (stat: %v); bad input must be refused before touching the disk", db, err)
			}
		})
	}
}

// --leader-timeout reaches the configuration the PostgreSQL store is opened with.
func TestServeLeaderTimeout(t *testing.T) {
	t.Parallel()
	fs := flagsFor(find("serve"))
	sf := addServeFlags(&env{getenv: func(string) string { return "" }}, fs)
	if _, err := parse(fs, []string{"--db", "postgres://jobwire@db.example/jobwire", "--leader-timeout", "7s"}); err != nil {
		t.Fatal(err)
	}
	cfg := config.Defaults()
	if err := sf.apply(&cfg); err != nil {
		t.Fatalf("apply() = %v", err)
	}
	if cfg.LeaderTimeout != 7*time.Second {
		t.Fatalf("leader timeout %s, want 7s", cfg.LeaderTimeout)
	}
}

func TestServeFlagsOverrideConfig(t *testing.T) {
	t.Parallel()
	fromFile := storeretry.Options{MaxTransientRetries: 7, TransientRetryBaseDelay: time.Second, CommandTimeout: time.Minute}
	tests := []struct {
		name  string
		args  []string
		want  storeretry.Options
		level string
	}{
		{"none set keeps the file's values", nil, fromFile, "info"},
		{"all set", []string{"--max-transient-retries", "0", "--transient-retry-base-delay", "0s", "--command-timeout", "250ms", "--log-level", "debug"},
			storeretry.Options{MaxTransientRetries: 0, TransientRetryBaseDelay: 0, CommandTimeout: 250 * time.Millisecond}, "debug"},
		{"one set", []string{"--transient-retry-base-delay", "50ms"},
			storeretry.Options{MaxTransientRetries: 7, TransientRetryBaseDelay: 50 * time.Millisecond, CommandTimeout: time.Minute}, "info"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fs := flagsFor(find("serve"))
			sf := addServeFlags(&env{getenv: func(string) string { return "" }}, fs)
			if _, err := parse(fs, tt.args); err != nil {
				t.Fatal(err)
			}
			cfg := config.Defaults()
			cfg.Storage = fromFile
			cfg.DB = filepath.Join(t.TempDir(), "j.db")
			if err := sf.apply(&cfg); err != nil {
				t.Fatalf("apply() = %v", err)
			}
			if cfg.Storage != tt.want || cfg.LogLevel != tt.level {
				t.Errorf("Storage = %+v, log level %s; want %+v, %s", cfg.Storage, cfg.LogLevel, tt.want, tt.level)
			}
		})
	}
}

func TestServeHelpShowsFlagTypes(t *testing.T) {
	t.Parallel()
	// A bad value in the environment does not stand in the way of help.
	r := runCLI(t, map[string]string{"JOBWIRE_COMMAND_TIMEOUT": "soon"}, "serve", "-h")
	wantOK(t, r)
	wantContains(t, r.stdout, "Usage: jobwire serve", "--command-timeout duration", "(env JOBWIRE_COMMAND_TIMEOUT)",
		"--listen string", "--max-transient-retries int", "--transient-retry-base-delay duration")
}

// A PostgreSQL server that cannot be reached is named once in the error, without its password.
func TestServeUnreachablePostgresNamedOnce(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	url := "postgres://jobwire:secret@" + addr + "/jobwire?connect_timeout=5"
	r := runServeLine(t, nil, "--listen", "127.0.0.1:0", "--http-listen", "off", "--db", url)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1; stderr: %s", r.code, r.stderr)
	}
	redacted := strings.Replace(url, "secret", "xxxxx", 1)
	if n := strings.Count(r.stderr, "postgres://"); n != 1 || !strings.Contains(r.stderr, redacted) {
		t.Errorf("stderr names the database %d times, want once as %s:\n%s", n, redacted, r.stderr)
	}
	if strings.Contains(r.stderr, "secret") {
		t.Errorf("stderr shows the password:\n%s", r.stderr)
	}
}
