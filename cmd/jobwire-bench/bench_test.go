package main

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	t.Parallel()
	if s := summarize(nil); s != nil {
		t.Errorf("summarize(nil) = %+v, want nil", s)
	}
	s := summarize([]int64{int64(3 * time.Millisecond), int64(time.Millisecond), int64(2 * time.Millisecond)})
	if s.Samples != 3 || s.P50ms != 2 || s.MaxMs != 3 {
		t.Errorf("summarize = %+v, want 3 samples, p50 2ms, max 3ms", s)
	}
}

func TestLogField(t *testing.T) {
	t.Parallel()
	line := `time=2026-03-01T12:00:00Z level=INFO msg="jobwire broker listening" addr=127.0.0.1:40123 db=/tmp/x.db durability=NORMAL`
	tests := []struct{ key, want string }{
		{"addr", "127.0.0.1:40123"},
		{"durability", "NORMAL"},
		{"missing", ""},
	}
	for _, tt := range tests {
		if got := logField(line, tt.key); got != tt.want {
			t.Errorf("logField(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
}

func TestMakePayload(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_800_000_000, 123)
	for _, measure := range []bool{false, true} {
		p := makePayload(at, measure)
		if len(p) != payloadSize {
			t.Fatalf("payload is %d bytes, want %d", len(p), payloadSize)
		}
		if got := int64(binary.BigEndian.Uint64(p)); got != at.UnixNano() {
			t.Errorf("payload time = %d, want %d", got, at.UnixNano())
		}
		if (p[8] == 1) != measure {
			t.Errorf("measure flag = %d, want %v", p[8], measure)
		}
	}
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		check   func(benchConfig) bool
		wantErr string
	}{
		{name: "defaults", args: nil, check: func(c benchConfig) bool {
			return c.Jobs == 100_000 && c.Durability == "normal" && len(c.Scenarios) == len(allScenarios)
		}},
		{name: "quick shrinks what was not set", args: []string{"--quick", "--jobs", "500"}, check: func(c benchConfig) bool {
			return c.Jobs == 500 && c.E2EJobs == 5_000 && c.Duration == 2*time.Second
		}},
		{name: "scenario list", args: []string{"--scenarios", "drain, latency"}, check: func(c benchConfig) bool {
			return strings.Join(c.Scenarios, ",") == "drain,latency"
		}},
		{name: "unknown scenario", args: []string{"--scenarios", "nope"}, wantErr: `unknown scenario "nope"`},
		{name: "bad durability", args: []string{"--durability", "extra"}, wantErr: "--durability must be normal or full"},
		{name: "zero workers", args: []string{"--workers", "0"}, wantErr: "--workers must be at least 1"},
		{name: "repeat", args: []string{"--repeat", "3"}, check: func(c benchConfig) bool { return c.Repeat == 3 }},
		{name: "zero repeats", args: []string{"--repeat", "0"}, wantErr: "--repeat must be at least 1"},
		{name: "several brokers need PostgreSQL", args: []string{"--brokers", "2"}, wantErr: "--brokers 2 needs --db postgres://"},
		{name: "several brokers on PostgreSQL", args: []string{"--brokers", "2", "--db", "postgres://u@127.0.0.1/db"}, check: func(c benchConfig) bool {
			return c.Brokers == 2 && c.Store == "postgres"
		}},
		{name: "zero brokers", args: []string{"--brokers", "0"}, wantErr: "--brokers must be at least 1"},
		{name: "backlog", args: []string{"--backlog", "1000000"}, check: func(c benchConfig) bool { return c.Backlog == 1_000_000 }},
		{name: "negative backlog", args: []string{"--backlog", "-1"}, wantErr: "--backlog must not be negative"},
		{name: "backlog with external workers", args: []string{"--backlog", "10", "--worker-cmd", "true"},
			wantErr: "--backlog cannot be combined with --worker-cmd"},
		{name: "paused backlog needs a backlog", args: []string{"--backlog-paused"}, wantErr: "--backlog-paused needs --backlog N"},
		{name: "backlog of a type", args: []string{"--backlog", "10", "--backlog-type"}, check: func(c benchConfig) bool { return c.BacklogType }},
		{name: "backlog of a type, queue named", args: []string{"--backlog", "10", "--backlog-type", "--backlog-named"},
			check: func(c benchConfig) bool { return c.BacklogType && c.BacklogNamed }},
		{name: "named queue needs a backlog of a type", args: []string{"--backlog", "10", "--backlog-named"},
			wantErr: "--backlog-named needs --backlog-type"},
		{name: "backlog of a type needs a backlog", args: []string{"--backlog-type"}, wantErr: "--backlog-type needs --backlog N"},
		{name: "backlog of a type, paused", args: []string{"--backlog", "10", "--backlog-type", "--backlog-paused"},
			wantErr: "--backlog-type and --backlog-paused cannot be combined"},
		{name: "workers of several types", args: []string{"--worker-types", "8"}, check: func(c benchConfig) bool { return c.WorkerTypes == 8 }},
		{name: "workers of no type", args: []string{"--worker-types", "0"}, wantErr: "--worker-types must be at least 1"},
		{name: "several types with external workers", args: []string{"--worker-types", "2", "--worker-cmd", "true"},
			wantErr: "--worker-types cannot be combined with --worker-cmd"},
		{name: "warmup too long", args: []string{"--latency-duration", "1s", "--warmup", "2s"}, wantErr: "--warmup must be shorter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := parseFlags(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseFlags(%q) error = %v, want one containing %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseFlags(%q): %v", tt.args, err)
			}
			if !tt.check(c) {
				t.Errorf("parseFlags(%q) = %+v", tt.args, c)
			}
		})
	}
}

func TestSpreads(t *testing.T) {
	t.Parallel()
	lat := func(p99 float64) *latencyStats { return &latencyStats{P99ms: p99} }
	got := spreads([]result{
		{Name: "latency", JobsPerSec: 1000, Latency: lat(2.5)},
		{Name: "drain", JobsPerSec: 17000},
		{Name: "latency", JobsPerSec: 999, Latency: lat(3.1)},
		{Name: "drain", JobsPerSec: 16000},
		{Name: "latency", JobsPerSec: 1001, Latency: lat(2.0)},
	})
	want := []spread{
		{name: "latency", runs: 3, minRate: 999, maxRate: 1001, minP99: 2.0, maxP99: 3.1, hasLatency: true},
		{name: "drain", runs: 2, minRate: 16000, maxRate: 17000},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("spreads = %+v, want %+v", got, want)
	}
}

// The workers name the default queue beside a backlog of its own queue, or of a type with
// --backlog-named; they serve every queue beside a paused backlog or one of a type alone.
func TestWorkersNameTheDefaultQueue(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  benchConfig
		want bool
	}{
		{benchConfig{}, false},
		{benchConfig{Backlog: 10}, true},
		{benchConfig{Backlog: 10, BacklogPaused: true}, false},
		{benchConfig{Backlog: 10, BacklogType: true}, false},
		{benchConfig{Backlog: 10, BacklogType: true, BacklogNamed: true}, true},
	} {
		if got := c.cfg.namesDefaultQueue(); got != c.want {
			t.Errorf("%+v: names the default queue %t, want %t", c.cfg, got, c.want)
		}
	}
}

// -h prints a command's usage and asks for nothing more: run says errHelp, which main ends on
// with status 0, for the benchmark and each subcommand alike.
func TestEveryCommandAnswersHelp(t *testing.T) {
	for _, args := range [][]string{
		{"-h"},
		{compareCommand, "-h"},
		{breakdownCommand, "-h"},
		{floorCommand, "-h"},
		{machineCPUCommand, "-h"},
	} {
		if err := run(context.Background(), args); !errors.Is(err, errHelp) {
			t.Errorf("run(%q) = %v, want errHelp", args, err)
		}
	}
}
