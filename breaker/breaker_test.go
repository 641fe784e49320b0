package breaker

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string // substring naming the field; empty means valid
	}{
		{name: "default", mutate: func(*Config) {}},
		{name: "disabled zero config", mutate: func(c *Config) { *c = Config{Disabled: true} }},
		{name: "threshold zero", mutate: func(c *Config) { c.Mode, c.Threshold = ModeCount, 0 }, wantErr: "Threshold"},
		{name: "window zero", mutate: func(c *Config) { c.Mode, c.Window = ModeCount, 0 }, wantErr: "Window"},
		{name: "count fields unused in ratio mode", mutate: func(c *Config) { c.Threshold, c.Window = 0, 0 }},
		{name: "ratio fields unused in count mode", mutate: func(c *Config) { c.Mode, c.FailureRatio, c.MinCalls = ModeCount, 0, 0 }},
		{name: "ratio zero", mutate: func(c *Config) { c.FailureRatio = 0 }, wantErr: "FailureRatio"},
		{name: "ratio above one", mutate: func(c *Config) { c.FailureRatio = 1.5 }, wantErr: "FailureRatio"},
		{name: "ratio NaN", mutate: func(c *Config) { c.FailureRatio = math.NaN() }, wantErr: "FailureRatio"},
		{name: "ratio one", mutate: func(c *Config) { c.FailureRatio = 1 }},
		{name: "min calls zero", mutate: func(c *Config) { c.MinCalls = 0 }, wantErr: "MinCalls"},
		{name: "sampling window too short", mutate: func(c *Config) { c.SamplingWindow = 5 * time.Millisecond }, wantErr: "SamplingWindow"},
		{name: "unknown mode", mutate: func(c *Config) { c.Mode = 7 }, wantErr: "Mode"},
		{name: "open for negative", mutate: func(c *Config) { c.OpenFor = -time.Second }, wantErr: "OpenFor"},
		{name: "probe timeout zero", mutate: func(c *Config) { c.ProbeTimeout = 0 }, wantErr: "ProbeTimeout"},
		{name: "half open probes zero", mutate: func(c *Config) { c.HalfOpenProbes = 0 }, wantErr: "HalfOpenProbes"},
		{name: "close after zero", mutate: func(c *Config) { c.CloseAfter = 0 }, wantErr: "CloseAfter"},
		{name: "unknown kind", mutate: func(c *Config) { c.Count = 0x80 }, wantErr: "Count"},
		{name: "nothing counts", mutate: func(c *Config) { c.Count = 0 }, wantErr: "Count"},
		{name: "only open on fatal", mutate: func(c *Config) { c.Count, c.OpenOnFatal = 0, true }},
		{name: "zero config", mutate: func(c *Config) { *c = Config{} }, wantErr: "Mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want error naming %s", tt.wantErr)
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error %v does not wrap ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not name %s", err, tt.wantErr)
			}
		})
	}
}

func TestDefaultConfig(t *testing.T) {
	t.Parallel()

	count := Config{
		Mode: ModeCount, FailureRatio: 0.5, MinCalls: 20, SamplingWindow: 30 * time.Second,
		Threshold: 5, Window: 60 * time.Second, OpenFor: 30 * time.Second, ProbeTimeout: 30 * time.Second,
		HalfOpenProbes: 1, CloseAfter: 1, Count: KindsOf(Transient, Fatal, LeaseExpired, Timeout),
	}
	if c := CountConfig(); c != count {
		t.Errorf("CountConfig() = %+v, want %+v", c, count)
	}
	ratio := count
	ratio.Mode, ratio.Count = ModeRatio, KindsOf(Transient, LeaseExpired, Timeout)
	if c := DefaultConfig(); c != ratio {
		t.Errorf("DefaultConfig() = %+v, want %+v", c, ratio)
	}
}

func TestNames(t *testing.T) {
	t.Parallel()

	for _, s := range []State{StateClosed, StateOpen, StateHalfOpen} {
		got, ok := ParseState(s.String())
		if !ok || got != s {
			t.Errorf("ParseState(%q) = %v, %v; want %v", s, got, ok, s)
		}
	}
	if _, ok := ParseState("open"); ok {
		t.Error(`ParseState("open") succeeded; names are case-sensitive`)
	}
	if got := State(0).String(); got != "State(0)" {
		t.Errorf("State(0).String() = %q", got)
	}
	if State(0).Valid() || State(4).Valid() {
		t.Error("State(0) or State(4) reported valid")
	}

	for _, k := range []FailureKind{Transient, Fatal, LeaseExpired, Timeout} {
		got, ok := ParseFailureKind(k.String())
		if !ok || got != k {
			t.Errorf("ParseFailureKind(%q) = %v, %v; want %v", k, got, ok, k)
		}
	}
	if _, ok := ParseFailureKind("FATAL"); ok {
		t.Error(`ParseFailureKind("FATAL") succeeded; names are lower case`)
	}

	kindsTests := []struct {
		k    Kinds
		want string
	}{
		{0, "none"},
		{AllKinds, "transient|fatal|lease_expired|timeout"},
		{KindsOf(Fatal, Timeout), "fatal|timeout"},
		{Kinds(Transient) | 0x40, "transient|Kinds(0x40)"},
	}
	for _, tt := range kindsTests {
		if got := tt.k.String(); got != tt.want {
			t.Errorf("Kinds(%#x).String() = %q, want %q", uint8(tt.k), got, tt.want)
		}
	}
	if KindsOf(Fatal).Has(0) {
		t.Error("a set reports holding the zero kind")
	}
	if !KindsOf(Fatal, Timeout).Has(Timeout) || KindsOf(Fatal, Timeout).Has(Transient) {
		t.Error("KindsOf(Fatal, Timeout) membership is wrong")
	}
	if got := ReasonProbeFailed.String(); got != "probe_failed" {
		t.Errorf("ReasonProbeFailed.String() = %q", got)
	}
}

func TestLegalTransitions(t *testing.T) {
	t.Parallel()

	tests := []struct {
		from, to State
		reason   Reason
		want     bool
	}{
		{StateClosed, StateOpen, ReasonThreshold, true},
		{StateClosed, StateOpen, ReasonFatal, true},
		{StateOpen, StateHalfOpen, ReasonOpenElapsed, true},
		{StateHalfOpen, StateOpen, ReasonProbeFailed, true},
		{StateHalfOpen, StateClosed, ReasonProbesSucceeded, true},
		{StateHalfOpen, StateHalfOpen, ReasonRestored, true},
		{StateOpen, StateClosed, ReasonReset, true},
		{StateClosed, StateClosed, ReasonReset, true},
		{StateOpen, StateOpen, ReasonReset, false},
		{StateClosed, StateHalfOpen, ReasonForced, true},
		{StateClosed, StateHalfOpen, ReasonOpenElapsed, false},
		{StateOpen, StateClosed, ReasonProbesSucceeded, false},
		{StateClosed, StateOpen, ReasonProbeFailed, false},
		{StateOpen, StateOpen, ReasonRestored, false},
		{0, StateOpen, ReasonForced, false},
		{StateOpen, 9, ReasonForced, false},
	}
	for _, tt := range tests {
		if got := legal(tt.from, tt.to, tt.reason); got != tt.want {
			t.Errorf("legal(%v, %v, %v) = %v, want %v", tt.from, tt.to, tt.reason, got, tt.want)
		}
	}
}
