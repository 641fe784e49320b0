package main

import (
	"flag"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestBadCommandLinesExitTwoWithOneSentence(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"no command", nil, "Usage:"},
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"unknown subcommand", []string{"dlq", "explode"}, `unknown command "dlq explode"`},
		{"mistyped command", []string{"stast"}, `unknown command "stast"; did you mean "stats"?`},
		{"mistyped group", []string{"qeueus", "list"}, `unknown command "qeueus"; did you mean "queues"?`},
		{"mistyped subcommand", []string{"dlq", "lsit"}, `unknown command "dlq lsit"; did you mean "dlq list"?`},
		{"mistyped flag", []string{"enqueue", "--tpye", "t"}, "unknown flag --tpye; did you mean --type?"},
		{"mistyped serve flag", []string{"serve", "--lisen", "127.0.0.1:0"}, "unknown flag --lisen; did you mean --listen?"},
		{"group without subcommand", []string{"queues"}, `"queues" needs a subcommand: list, pause, resume, set-limit`},
		{"unknown flag", []string{"stats", "--verbose"}, "unknown flag --verbose"},
		{"flag without value", []string{"enqueue", "--type"}, "flag --type needs a value"},
		{"enqueue without type", []string{"enqueue", "--payload", "{}"}, "--type is required"},
		{"enqueue bad json", []string{"enqueue", "--type", "t", "--payload", "{nope"}, "--payload is not valid JSON"},
		{"enqueue empty payload", []string{"enqueue", "--type", "t", "--payload", ""}, "--payload is not valid JSON"},
		{"enqueue bad delay", []string{"enqueue", "--type", "t", "--delay", "soon"}, `invalid duration "soon"`},
		{"enqueue negative delay", []string{"enqueue", "--type", "t", "--delay", "-5s"}, "--delay must not be negative"},
		{"enqueue delay and run-at", []string{"enqueue", "--type", "t", "--delay", "1m", "--run-at", "2030-01-01T00:00:00Z"}, "not both"},
		{"enqueue bad run-at", []string{"enqueue", "--type", "t", "--run-at", "tomorrow"}, "not an RFC 3339 time"},
		{"enqueue priority too high", []string{"enqueue", "--type", "t", "--priority", "1001"}, "outside -1000..1000"},
		{"enqueue max-attempts too high", []string{"enqueue", "--type", "t", "--max-attempts", "1000001"}, "--max-attempts 1000001 is outside 0..1000000"},
		{"enqueue bad priority", []string{"enqueue", "--type", "t", "--priority", "high"}, `invalid value "high" for flag --priority`},
		{"enqueue stray argument", []string{"enqueue", "--type", "t", "extra"}, `unexpected argument "extra"`},
		{"enqueue bad depends-on", []string{"enqueue", "--type", "t", "--depends-on", "3,x"}, `job id "x" is not a positive integer`},
		{"enqueue depends-on and delay", []string{"enqueue", "--type", "t", "--depends-on", "3", "--delay", "1m"}, "leave out --delay and --run-at"},
		{"enqueue run-if-parents-fail alone", []string{"enqueue", "--type", "t", "--run-if-parents-fail"}, "--run-if-parents-fail needs --depends-on"},
		{"graph enqueue without file", []string{"graph", "enqueue"}, "missing graph FILE"},
		{"graph enqueue missing file", []string{"graph", "enqueue", "no-such-graph.json"}, "cannot read the graph file"},
		{"graph enqueue not a graph", []string{"graph", "enqueue", "testdata/graph-bad.json"}, "the graph file is not a graph"},
		{"graph get bad id", []string{"graph", "get", "x"}, `job id "x" is not a positive integer`},
		{"job get without id", []string{"job", "get"}, "missing job ID"},
		{"job get bad id", []string{"job", "get", "abc"}, `job id "abc" is not a positive integer`},
		{"job get zero id", []string{"job", "get", "0"}, "not a positive integer"},
		{"job cancel two ids", []string{"job", "cancel", "1", "2"}, `unexpected argument "2"`},
		{"jobs list bad state", []string{"jobs", "list", "--state", "sleeping"}, `unknown job state "sleeping"`},
		{"jobs list limit too big", []string{"jobs", "list", "--limit", "5000"}, "outside 1..1000"},
		{"jobs list bad sort", []string{"jobs", "list", "--sort", "payload"}, `--sort "payload" is not a column of this list; use one of created_at, id, type, queue, state, priority, run_at, attempts`},
		{"dlq list bad sort", []string{"dlq", "list", "--sort", "state"}, `--sort "state" is not a column of this list; use one of died_at, created_at, id,`},
		{"dlq list bad reason", []string{"dlq", "list", "--reason", "bored"}, `unknown dead reason "bored"`},
		{"dlq list since and after", []string{"dlq", "list", "--since", "1h", "--after", "2030-01-01T00:00:00Z"}, "--since or --after"},
		{"dlq list empty window", []string{"dlq", "list", "--after", "2030-01-02T00:00:00Z", "--before", "2030-01-01T00:00:00Z"}, "window is empty"},
		{"dlq requeue nothing", []string{"dlq", "requeue"}, "name the dead jobs by id"},
		{"dlq requeue filter without all-matching", []string{"dlq", "requeue", "--type", "t"}, "add --all-matching"},
		{"dlq requeue ids and all-matching", []string{"dlq", "requeue", "1", "--all-matching"}, "not both"},
		{"dlq requeue ids and filter", []string{"dlq", "requeue", "1", "--queue", "q"}, "only with --all-matching"},
		{"dlq requeue payload for many", []string{"dlq", "requeue", "1", "2", "--payload", "{}"}, "exactly one job id"},
		{"dlq requeue bad payload", []string{"dlq", "requeue", "1", "--payload", "[1,"}, "--payload is not valid JSON"},
		{"dlq requeue bad priority", []string{"dlq", "requeue", "1", "--priority", "-2000"}, "outside -1000..1000"},
		{"dlq purge bad id", []string{"dlq", "purge", "1", "x"}, `job id "x"`},
		{"dlq purge limit", []string{"dlq", "purge", "--all-matching", "--limit", "20000"}, "outside 1..10000"},
		{"queues pause without name", []string{"queues", "pause"}, "missing queue name"},
		{"queues set-limit without limit", []string{"queues", "set-limit", "mail"}, "missing limit"},
		{"queues set-limit negative", []string{"queues", "set-limit", "mail", "-1"}, "negative numbers are not allowed"},
		{"queues set-limit not a number", []string{"queues", "set-limit", "mail", "many"}, `limit "many"`},
		{"breakers force bad state", []string{"breakers", "force", "t", "ajar"}, `unknown breaker state "ajar"`},
		{"breakers force missing state", []string{"breakers", "force", "t"}, "missing state"},
		{"purge-succeeded without age", []string{"purge-succeeded"}, "--older-than is required"},
		{"purge-succeeded bad age", []string{"purge-succeeded", "--older-than", "a while"}, "invalid duration"},
		{"bad timeout", []string{"stats", "--timeout", "0s"}, "--timeout must be positive"},
		{"empty addr", []string{"stats", "--addr", ""}, "--addr is empty; write host:port, e.g. 127.0.0.1:7070"},
		{"addr without port", []string{"stats", "--addr", "127.0.0.1"}, `--addr "127.0.0.1" has no port; write host:port, e.g. 127.0.0.1:7070`},
		{"addr without port, IPv6", []string{"stats", "--addr", "[::1]"}, `--addr "[::1]" has no port`},
		{"addr as a URL", []string{"stats", "--addr", "http://broker.internal:7070/"}, `--addr "http://broker.internal:7070/" is a URL; drop the http:// and write host:port, e.g. broker.internal:7070`},
		{"addr without host", []string{"stats", "--addr", ":7070"}, `--addr ":7070" has no host; write host:port, e.g. 127.0.0.1:7070`},
		{"addr with a bad port", []string{"stats", "--addr", "localhost:http"}, `--addr "localhost:http": port "http" is not a number in 1..65535`},
		{"addr with two colons", []string{"stats", "--addr", "a:b:c"}, `--addr "a:b:c" is not host:port`},
		{"version with argument", []string{"version", "now"}, "takes no arguments"},
		{"argument not UTF-8", []string{"queues", "pause", "ma\xffil"}, `argument "ma\xffil" is not valid UTF-8`},
		{"flag value not UTF-8", []string{"jobs", "list", "--queue", "\xff"}, `--queue "\xff" is not valid UTF-8`},
		{"help for unknown command", []string{"help", "nope"}, `unknown command "nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Point at a closed port: a case that wrongly passed validation would exit 1.
			environ := map[string]string{envAddr: closedAddr(t)}
			r := runCLI(t, environ, tt.args...)
			if r.code != 2 {
				t.Fatalf("exit %d, want 2; stderr: %s", r.code, r.stderr)
			}
			if !strings.Contains(r.stderr, tt.want) {
				t.Errorf("stderr %q does not contain %q", r.stderr, tt.want)
			}
			if r.stdout != "" {
				t.Errorf("stdout should be empty, got %q", r.stdout)
			}
			if tt.args != nil && strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
				t.Errorf("stderr should be one line, got %q", r.stderr)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"help"}, []string{"dlq requeue", "purge-succeeded", "JOBWIRE_ADDR"}},
		{[]string{"-h"}, []string{"breakers force"}},
		{[]string{"--help"}, []string{"queues set-limit"}},
		{[]string{"help", "dlq", "requeue"}, []string{"Usage: jobwire dlq requeue", "--all-matching", "--yes", "--addr string"}},
		{[]string{"dlq", "requeue", "-h"}, []string{"Usage: jobwire dlq requeue", "--since duration"}},
		{[]string{"job", "get", "5", "--help"}, []string{"Usage: jobwire job get ID"}},
		{[]string{"help", "version"}, []string{"Usage: jobwire version\n"}},
		{[]string{"dlq", "--help"}, []string{"Usage: jobwire dlq SUBCOMMAND", "Subcommands:", "requeue", "Send dead jobs back"}},
		{[]string{"dlq", "-h"}, []string{"Usage: jobwire dlq SUBCOMMAND"}},
		{[]string{"help", "dlq"}, []string{"Usage: jobwire dlq SUBCOMMAND", "top"}},
		{[]string{"queues", "help"}, []string{"Usage: jobwire queues SUBCOMMAND", "set-limit"}},
		{[]string{"version"}, []string{"jobwire "}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, nil, tt.args...)
			if r.code != 0 {
				t.Fatalf("exit %d, want 0; stderr: %s", r.code, r.stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("stdout does not contain %q:\n%s", w, r.stdout)
				}
			}
		})
	}
}

func TestEveryGroupHasHelp(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, c := range commands {
		group, _, ok := strings.Cut(c.name, " ")
		if !ok || seen[group] {
			continue
		}
		seen[group] = true
		for _, args := range [][]string{{group, "--help"}, {group, "-h"}, {"help", group}} {
			r := runCLI(t, nil, args...)
			if r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: jobwire "+group+" SUBCOMMAND") || r.stderr != "" {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want the group's help and exit 0", args, r.code, r.stdout, r.stderr)
			}
			if groups[group] == "" {
				t.Errorf("group %q has no summary in groups", group)
			}
		}
	}
}

func TestEveryCommandHasHelp(t *testing.T) {
	t.Parallel()
	for _, c := range commands {
		if c.name == "help" || c.name == "version" || c.name == "serve" {
			continue // help takes a command, version no flags, serve is documented by its own flags
		}
		r := runCLI(t, nil, append(strings.Fields(c.name), "-h")...)
		talks := !noBroker[c.name] // a command that talks to a broker takes --addr
		if r.code != 0 || !strings.Contains(r.stdout, "Usage: jobwire "+c.name) || strings.Contains(r.stdout, "--addr") != talks {
			t.Errorf("%s -h: exit %d, stdout %q, stderr %q", c.name, r.code, r.stdout, r.stderr)
		}
	}
}

func TestParseAcceptsFlagsAnywhere(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args     []string
		wantPos  []string
		wantJSON bool
		wantQ    string
	}{
		{[]string{"42"}, []string{"42"}, false, ""},
		{[]string{"42", "--json"}, []string{"42"}, true, ""},
		{[]string{"--json", "42"}, []string{"42"}, true, ""},
		{[]string{"1", "--queue", "q", "2", "--json", "3"}, []string{"1", "2", "3"}, true, "q"},
		{[]string{"--queue=q", "1", "--", "--json", "-5"}, []string{"1", "--json", "-5"}, false, "q"},
		{nil, nil, false, ""},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		js := fs.Bool("json", false, "")
		q := fs.String("queue", "", "")
		pos, err := parse(fs, tt.args)
		if err != nil {
			t.Errorf("parse(%q): %v", tt.args, err)
			continue
		}
		if !slices.Equal(pos, tt.wantPos) || *js != tt.wantJSON || *q != tt.wantQ {
			t.Errorf("parse(%q) = %q json=%v queue=%q; want %q json=%v queue=%q", tt.args, pos, *js, *q, tt.wantPos, tt.wantJSON, tt.wantQ)
		}
	}
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"90s", 90 * time.Second, false},
		{"1h30m", 90 * time.Minute, false},
		{"7d", 7 * 24 * time.Hour, false},
		{"0d", 0, false},
		{"1.5d", 0, true},
		{"-1d", 0, true},
		{"d", 0, true},
		{"soon", 0, true},
	}
	for _, tt := range tests {
		got, err := parseDuration(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("parseDuration(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestEnumNamesParseInEveryForm(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"dead", "DEAD", "JOB_STATE_DEAD", "job_state_dead"} {
		if s, err := parseState(in); err != nil || s.String() != "JOB_STATE_DEAD" {
			t.Errorf("parseState(%q) = %v, %v", in, s, err)
		}
	}
	for _, in := range []string{"max-attempts-exhausted", "MAX_ATTEMPTS_EXHAUSTED", "DEAD_REASON_MAX_ATTEMPTS_EXHAUSTED"} {
		if r, err := parseDeadReason(in); err != nil || r.String() != "DEAD_REASON_MAX_ATTEMPTS_EXHAUSTED" {
			t.Errorf("parseDeadReason(%q) = %v, %v", in, r, err)
		}
	}
	for _, in := range []string{"half-open", "HALF_OPEN", "half_open"} {
		if b, err := parseBreakerState(in); err != nil || b.String() != "BREAKER_STATE_HALF_OPEN" {
			t.Errorf("parseBreakerState(%q) = %v, %v", in, b, err)
		}
	}
	for _, in := range []string{"unspecified", "JOB_STATE_UNSPECIFIED", ""} {
		if _, err := parseState(in); err == nil {
			t.Errorf("parseState(%q) succeeded; the zero value is not a state", in)
		}
	}
}

func TestSuggestOnlyCloseNames(t *testing.T) {
	t.Parallel()
	names := []string{"serve", "stats", "status-page", "dlq", "queues", "top"}
	tests := []struct{ typed, want string }{
		{"stast", "stats"},
		{"serv", "serve"},
		{"dql", "dlq"},
		{"que", "queues"},
		{"tpo", "top"},
		{"frobnicate", ""},
		{"x", ""},
		{"zzz", ""},
	}
	for _, tt := range tests {
		if got := suggest(tt.typed, names); got != tt.want {
			t.Errorf("suggest(%q) = %q, want %q", tt.typed, got, tt.want)
		}
	}
}
