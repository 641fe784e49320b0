package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/internal/app"
	"github.com/jobwire/jobwire/internal/config"
	"github.com/jobwire/jobwire/store/postgres"
)

// brokerCommand is the hidden subcommand that runs the broker inside this binary, so that its
// CPU can be profiled without a profiling hook in the jobwire command.
const brokerCommand = "broker"

// brokerProc is one running broker process.
type brokerProc struct {
	cmd  *exec.Cmd
	addr string
	// http is the address of the broker's HTTP listener, where its metrics are read
	// (writerTime), as its log announced it; empty if it announced none.
	http string
	log  string
	done chan error
}

// scenarioDB returns a fresh database for one run of a scenario: a SQLite file in a folder of
// its own in dir, or a new schema of the PostgreSQL database, which every broker of the
// scenario shares. drop removes that folder or schema, once the scenario's brokers have
// stopped, unless the run keeps its databases (--keep): a run leaves nothing behind.
func scenarioDB(ctx context.Context, cfg *benchConfig, dir, scenario string) (db string, drop func() error, err error) {
	if cfg.Postgres == "" {
		// A folder of its own per run: a repeated scenario (--repeat) must not find the jobs
		// of the run before it, which a drain followed through the broker's counts would take
		// for its own.
		d, err := os.MkdirTemp(dir, scenario+"-")
		if err != nil {
			return "", nil, err
		}
		return filepath.Join(d, scenario+".db"), func() error {
			if cfg.keep {
				return nil
			}
			return os.RemoveAll(d)
		}, nil
	}
	db, schema, err := freshSchema(ctx, cfg.Postgres, scenario)
	if err != nil {
		return "", nil, err
	}
	drop = func() error {
		if cfg.keep {
			fmt.Fprintf(os.Stderr, "jobwire-bench: kept schema %s\n", schema)
			return nil
		}
		return dropSchema(cfg.Postgres, schema)
	}
	return db, drop, nil
}

// startBroker starts a broker named name on a free loopback port on db and waits until it
// listens. It reads the address from the broker's "listening" log line, so no port is guessed
// and none can be taken in between.
func startBroker(ctx context.Context, cfg *benchConfig, dir, db, name string) (*brokerProc, error) {
	logPath := filepath.Join(dir, name+".broker.log")
	var cmd *exec.Cmd
	if cfg.profDir != "" {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cmd = exec.Command(self, brokerCommand, "--listen", "127.0.0.1:0", "--db", db,
			"--durability", cfg.Durability, "--metrics", cfg.Metrics, "--cpuprofile", filepath.Join(cfg.profDir, "broker-"+name+".pprof"))
	} else {
		cmd = exec.Command(cfg.brokerBin, "serve", "--listen", "127.0.0.1:0", "--db", db,
			"--durability", cfg.Durability, "--log-level", "info",
			"--http-listen", "127.0.0.1:0", "--metrics", cfg.Metrics)
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		_ = logFile.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start broker: %w", err)
	}
	b := &brokerProc{cmd: cmd, log: logPath, done: make(chan error, 1)}
	type listening struct{ grpc, http string }
	addrc := make(chan listening, 1)
	go func() {
		// Copy the log to its file, picking the addresses out of the lines that announce
		// them: the HTTP listener's comes first.
		sc := bufio.NewScanner(stderr)
		var httpAddr string
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logFile, line)
			switch {
			case strings.Contains(line, "jobwire http listening"):
				httpAddr = logField(line, "addr")
			case strings.Contains(line, "jobwire broker listening"):
				if a := logField(line, "addr"); a != "" {
					select {
					case addrc <- listening{grpc: a, http: httpAddr}:
					default:
					}
				}
			}
		}
		_, _ = io.Copy(logFile, stderr)
		_ = logFile.Close()
		b.done <- cmd.Wait()
	}()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	select {
	case l := <-addrc:
		b.addr, b.http = l.grpc, l.http
		return b, nil
	case err := <-b.done:
		b.done <- err
		return nil, fmt.Errorf("broker exited before listening (%v); see %s", err, logPath)
	case <-timeout.C:
		b.stop()
		return nil, fmt.Errorf("broker did not start listening within 30s; see %s", logPath)
	case <-ctx.Done():
		b.stop()
		return nil, context.Cause(ctx)
	}
}

// freshSchema creates a new schema for one scenario's broker in the database at dbURL and
// returns it and a URL whose connections use it. Schemas are named after the scenario and the
// time.
func freshSchema(ctx context.Context, dbURL, scenario string) (db, schema string, err error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return "", "", fmt.Errorf("connect to %s: %w", postgres.Redact(dbURL), err)
	}
	defer conn.Close(ctx)
	schema = "jobwire_bench_" + strings.ReplaceAll(scenario, "-", "_") + "_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := conn.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		return "", "", fmt.Errorf("create schema %s: %w", schema, err)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", "", err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), schema, nil
}

// dropSchema drops a scenario's schema and everything in it. It has a context of its own, so
// a run stopped by a signal still cleans up after itself.
func dropSchema(dbURL, schema string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", postgres.Redact(dbURL), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`); err != nil {
		return fmt.Errorf("drop schema %s: %w", schema, err)
	}
	return nil
}

// logField returns the value of key=value in a slog text line.
func logField(line, key string) string {
	_, rest, ok := strings.Cut(line, " "+key+"=")
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, " ")
	return strings.Trim(v, `"`)
}

// stop asks the broker to shut down gracefully and kills it if it has not within a minute
// (its own shutdown grace is 30s).
func (b *brokerProc) stop() error {
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-b.done:
		return err
	case <-time.After(time.Minute):
		_ = b.cmd.Process.Kill()
		return fmt.Errorf("broker did not stop within a minute; killed (see %s)", b.log)
	}
}

// runBroker is the hidden broker subcommand: the same wiring as `jobwire serve` with default
// settings, plus an optional CPU profile of the whole run.
func runBroker(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(brokerCommand, flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	db := fs.String("db", "", "SQLite database file")
	durability := fs.String("durability", "normal", "normal or full")
	profile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	metricsOn := fs.String("metrics", "on", "Prometheus metrics: on or off")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if *db == "" {
		return errors.New("broker: --db is required")
	}
	cfg := config.Defaults()
	cfg.Listen, cfg.DB, cfg.FullSync = *listen, *db, *durability == "full"
	cfg.HTTPListen, cfg.Metrics = "127.0.0.1:0", *metricsOn != "off"
	if *profile != "" {
		stop, err := startProfiles(*profile)
		if err != nil {
			return err
		}
		defer stop()
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	return app.Run(ctx, cfg, log, nil)
}

// buildBroker builds the jobwire command into dir.
func buildBroker(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "jobwire")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/jobwire/jobwire/cmd/jobwire")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build the broker (run from inside the jobwire module, or pass --broker-bin): %w", err)
	}
	return bin, nil
}
