package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestParseCompareFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    compareConfig
		wantErr string // part of what is printed for a bad command line
	}{
		{name: "ref and bench flags", args: []string{"--ref", "HEAD~1", "--rounds", "5", "--", "--quick", "--scenarios", "drain"},
			want: compareConfig{ref: "HEAD~1", rounds: 5, benchArgs: []string{"--quick", "--scenarios", "drain"}}},
		{name: "three rounds by default", args: []string{"--ref", "main"}, want: compareConfig{ref: "main", rounds: 3}},
		{name: "no ref", args: []string{"--rounds", "2"}, wantErr: "--ref is required"},
		{name: "no rounds", args: []string{"--ref", "main", "--rounds", "0"}, wantErr: "--rounds must be at least 1, got 0"},
		{name: "json is compare's", args: []string{"--ref", "main", "--", "--json=x.json"}, wantErr: `"--json=x.json" is set by compare itself`},
		{name: "broker-bin is compare's", args: []string{"--ref", "main", "--", "-broker-bin", "x"}, wantErr: `"-broker-bin" is set by compare itself`},
		{name: "unknown flag", args: []string{"--ref", "main", "--fast"}, wantErr: "flag provided but not defined: -fast"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			got, err := parseCompareFlags(tt.args, &out)
			if tt.wantErr != "" {
				if !errors.Is(err, errUsage) || !strings.Contains(out.String(), tt.wantErr) {
					t.Fatalf("err %v, printed %q; want errUsage and %q", err, out.String(), tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("err %v, printed %q", err, out.String())
			}
			if got.ref != tt.want.ref || got.rounds != tt.want.rounds || strings.Join(got.benchArgs, " ") != strings.Join(tt.want.benchArgs, " ") {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestComparisonTakesMediansAndRatios(t *testing.T) {
	lat := func(p50, p99 float64) *latencyStats { return &latencyStats{P50ms: p50, P99ms: p99} }
	base := [][]result{
		{{Name: "drain", JobsPerSec: 10_000, MachineCPUus: 100}, {Name: "latency", JobsPerSec: 1000, Latency: lat(1, 4)}},
		{{Name: "drain", JobsPerSec: 12_000, MachineCPUus: 110}, {Name: "latency", JobsPerSec: 1000, Latency: lat(2, 6)}},
		{{Name: "drain", JobsPerSec: 30_000, MachineCPUus: 120}, {Name: "latency", JobsPerSec: 1000, Latency: lat(3, 5)}},
	}
	head := [][]result{
		{{Name: "drain", JobsPerSec: 18_000, MachineCPUus: 88}, {Name: "latency", JobsPerSec: 1000, Latency: lat(1, 2)}},
		{{Name: "drain", JobsPerSec: 15_000, MachineCPUus: 99}, {Name: "latency", JobsPerSec: 1000, Latency: lat(1, 3)}},
		{{Name: "e2e-100", JobsPerSec: 9_000}},
	}
	cs := compareRuns(base, head)
	if len(cs) != 3 || cs[0].name != "drain" || cs[1].name != "latency" || cs[2].name != "e2e-100" {
		t.Fatalf("scenarios %+v: want drain, latency, e2e-100 in order of first appearance", cs)
	}
	if got := ratio(cs[0].base.rate, cs[0].head.rate); got != "1.38x" { // medians 12,000 and 16,500
		t.Errorf("drain ratio %s, want 1.38x", got)
	}
	if got := ratio(cs[1].base.p99, cs[1].head.p99); got != "0.50x" { // medians 5 and 2.5
		t.Errorf("p99 ratio %s, want 0.50x", got)
	}
	if got := ratio(cs[2].base.rate, cs[2].head.rate); got != "-" {
		t.Errorf("a scenario only one side ran has ratio %s, want -", got)
	}
	var out bytes.Buffer
	printComparison(&out, cs, "main (abc)")
	for _, want := range []string{"ratio = work tree / main (abc)", "12000 (10000-30000)", "16500 (15000-18000)", "1.38x", "  p99 ms", "0.50x",
		"  machine us/job 110.0 (100.0-120.0)", "93.5 (88.0-99.0)", "0.85x"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	// Only the drain reports a CPU figure, and only the machine's.
	if n := strings.Count(out.String(), "us/job"); n != 1 {
		t.Errorf("%d CPU lines, want the drain's machine line alone:\n%s", n, out.String())
	}
}
