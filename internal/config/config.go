// Package config reads the broker's configuration file (YAML) and checks it before the broker
// starts, so that a bad setting stops `jobwire serve` with a sentence naming it.
package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/broker"
	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/retry"
	"github.com/jobwire/jobwire/server"
	"github.com/jobwire/jobwire/store/postgres"
	"github.com/jobwire/jobwire/store/storeretry"
)

// File is the configuration file's shape. Every field is optional.
type File struct {
	Listen            string             `yaml:"listen"`
	DB                string             `yaml:"db"`
	Durability        string             `yaml:"durability"` // normal (default) or full
	LeaseDuration     time.Duration      `yaml:"lease_duration"`
	HeartbeatInterval time.Duration      `yaml:"heartbeat_interval"`
	AttemptTimeout    time.Duration      `yaml:"attempt_timeout"`
	MaxPayloadBytes   int                `yaml:"max_payload_bytes"`
	MaxResultBytes    int                `yaml:"max_result_bytes"`
	AlwaysFatal       []string           `yaml:"always_fatal"`
	Retry             RetryFile          `yaml:"retry"`
	Breaker           BreakerFile        `yaml:"breaker"`
	JobTypes          map[string]TypeCfg `yaml:"job_types"`
	RateLimits        []RateLimitFile    `yaml:"rate_limits"`
	Storage           StorageFile        `yaml:"storage"`
	Retention         RetentionFile      `yaml:"retention"`
	// Concurrency are limits of running jobs per key (broker.ConcurrencyRule), stored at start
	// over any rule of the same name set at run time.
	Concurrency []ConcurrencyFile `yaml:"concurrency"`
	LogLevel    string            `yaml:"log_level"`  // debug, info (default), warn, error
	LogFormat   string            `yaml:"log_format"` // text (default) or json
	// HTTPListen is the address of the HTTP listener (metrics, health, dashboard), or "off".
	HTTPListen string `yaml:"http_listen"`
	// Metrics turns the Prometheus metrics on (default) or off.
	Metrics *bool `yaml:"metrics"`
	// MetricsAuth makes /metrics need a token when authentication is on (default: open).
	MetricsAuth *bool   `yaml:"metrics_auth"`
	TLS         TLSFile `yaml:"tls"`
	Auth        *bool   `yaml:"auth"`     // require a token on every call
	Insecure    *bool   `yaml:"insecure"` // allow serving other machines without TLS and auth
	// BootstrapTokenFile receives the first admin token (default: the database path + ".admin-token").
	BootstrapTokenFile string `yaml:"bootstrap_token_file"`
	// TokenCacheTTL is how long a verified token is trusted without reading the database.
	TokenCacheTTL time.Duration `yaml:"token_cache_ttl"`
	// MaxWorkerStreamsPerToken caps the worker streams one token may have open on a broker.
	MaxWorkerStreamsPerToken int `yaml:"max_worker_streams_per_token"`
	// HTTPAllowedHosts are the host names, besides loopback ones and the listener's own, that
	// the HTTP listener answers while auth is off (behind a proxy, say).
	HTTPAllowedHosts []string `yaml:"http_allowed_hosts"`
	// Schedules are the periodic schedules the file declares (schedules.go).
	Schedules []ScheduleFile `yaml:"schedules"`
}

// RetryFile overrides parts of a retry policy.
type RetryFile struct {
	BaseDelay   *time.Duration `yaml:"base_delay"`
	Multiplier  *float64       `yaml:"multiplier"`
	MaxDelay    *time.Duration `yaml:"max_delay"`
	JitterMax   *time.Duration `yaml:"jitter_max"`
	MaxAttempts *int           `yaml:"max_attempts"`
	MaxJobAge   *time.Duration `yaml:"max_job_age"`
}

// BreakerFile overrides parts of a circuit breaker's configuration.
type BreakerFile struct {
	Mode           *string        `yaml:"mode"` // ratio or count
	FailureRatio   *float64       `yaml:"failure_ratio"`
	MinCalls       *int           `yaml:"min_calls"`
	SamplingWindow *time.Duration `yaml:"sampling_window"`
	Threshold      *int           `yaml:"threshold"`
	Window         *time.Duration `yaml:"window"`
	OpenFor        *time.Duration `yaml:"open_for"`
	HalfOpenProbes *int           `yaml:"half_open_probes"`
	CloseAfter     *int           `yaml:"close_after"`
	ProbeTimeout   *time.Duration `yaml:"probe_timeout"`
	Count          []string       `yaml:"count"` // transient, fatal, lease_expired, timeout
	OpenOnFatal    *bool          `yaml:"open_on_fatal"`
	Disabled       *bool          `yaml:"disabled"`
}

// TypeCfg overrides the retry policy and breaker of one job type.
type TypeCfg struct {
	Retry   RetryFile   `yaml:"retry"`
	Breaker BreakerFile `yaml:"breaker"`
}

// RetentionFile says how long finished jobs are kept.
type RetentionFile struct {
	// Succeeded is how long SUCCEEDED jobs are kept (default 168h).
	Succeeded *time.Duration `yaml:"succeeded"`
	// Dead is how long DEAD and CANCELLED jobs are kept (default 720h).
	Dead *time.Duration `yaml:"dead"`
	// Audit is how long audit events (operator actions) are kept (default 2160h).
	Audit *time.Duration `yaml:"audit"`
}

// StorageFile holds the storage settings.
type StorageFile struct {
	MaxTransientRetries     *int           `yaml:"max_transient_retries"`
	TransientRetryBaseDelay *time.Duration `yaml:"transient_retry_base_delay"`
	CommandTimeout          *time.Duration `yaml:"command_timeout"`
	BusyTimeout             *time.Duration `yaml:"busy_timeout"`
	LeaderTimeout           *time.Duration `yaml:"leader_timeout"`
}

// Config is the checked configuration, ready to build a broker from.
type Config struct {
	Listen      string
	DB          string
	FullSync    bool
	Broker      broker.Config
	Breakers    broker.BreakerOptions
	Storage     storeretry.Options
	BusyTimeout time.Duration
	// LeaderTimeout is how long the leader of several brokers on one PostgreSQL database may go
	// without recording that it is alive before another takes over (postgres.Options); zero is
	// the store's default. Only a PostgreSQL database has a leader.
	LeaderTimeout time.Duration
	MaxPayload    int
	LogLevel      string
	LogFormat     string
	// HTTPListen is where /metrics, /healthz, /readyz and the dashboard are served; HTTPOff
	// turns the listener off.
	HTTPListen  string
	Metrics     bool
	MetricsAuth bool
	TLS         TLS
	Auth        bool
	Insecure    bool
	// BootstrapTokenFile receives the first admin token; "" means DB + ".admin-token".
	BootstrapTokenFile string
	// BootstrapToken, from JOBWIRE_BOOTSTRAP_TOKEN only, becomes the first admin token.
	BootstrapToken string
	// TokenCacheTTL is how long a verified token is trusted without reading the database: the
	// longest a token revoked through another broker may still work here if the revocation's
	// event is lost (auth.CacheOptions).
	TokenCacheTTL time.Duration
	// MaxWorkerStreamsPerToken caps the worker streams one token may have open at once
	// (server.Limits).
	MaxWorkerStreamsPerToken int
	// HTTPAllowedHosts are extra host names the HTTP listener answers while auth is off
	// (web.Options.AllowedHosts).
	HTTPAllowedHosts []string
}

// HTTPOff is the HTTPListen value that turns the HTTP listener off.
const HTTPOff = "off"

// DefaultHTTPListen is the HTTP listener's default address: loopback only, next to the gRPC
// port.
const DefaultHTTPListen = "127.0.0.1:7071"

// Defaults is the configuration with no file.
func Defaults() Config {
	return Config{
		Listen:      "127.0.0.1:7070",
		DB:          "./jobwire.db",
		Broker:      broker.DefaultConfig(),
		Breakers:    broker.BreakerOptions{Default: breaker.DefaultConfig()},
		Storage:     storeretry.DefaultOptions(),
		BusyTimeout: 5 * time.Second,
		MaxPayload:  1 << 20,
		LogLevel:    "info",
		LogFormat:   "text",
		HTTPListen:  DefaultHTTPListen,
		Metrics:     true,
		TLS:         TLS{ReloadInterval: DefaultTLSReloadInterval},

		TokenCacheTTL:            auth.DefaultCacheTTL,
		MaxWorkerStreamsPerToken: server.DefaultMaxWorkerStreamsPerToken,
	}
}

// Load reads the file at path (YAML); an empty path gives the defaults. Each mistake in the
// file is one line of the error, starting with the file's name and the line the mistake is on:
// "jobwire.yaml line 3: unknown key "retyr" (did you mean "retry"?)".
func Load(path string) (Config, error) {
	if path == "" {
		return Defaults(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("cannot read the configuration file %s: %w", path, errors.Unwrap(err))
	}
	cfg, err := Parse(data)
	if err != nil {
		var errs []error
		for _, e := range splitJoined(err) {
			var ce *Error
			if errors.As(e, &ce) && ce.Line > 0 {
				errs = append(errs, fmt.Errorf("%s line %d: %s", path, ce.Line, ce.Msg))
			} else {
				errs = append(errs, fmt.Errorf("%s: %w", path, e))
			}
		}
		return Config{}, errors.Join(errs...)
	}
	return cfg, nil
}

// Parse reads a configuration document and checks it. Unknown keys are errors, so a typo does
// not silently leave a default in place. The error joins one *Error per mistake.
func Parse(data []byte) (Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return Config{}, syntaxError(err)
	}
	c := &checker{lines: map[string]int{}}
	if len(root.Content) == 0 {
		return Defaults(), nil
	}
	c.check(root.Content[0], reflect.TypeFor[File](), "")
	if err := c.asErrors(); err != nil {
		return Config{}, err
	}
	var f File
	if err := root.Content[0].Decode(&f); err != nil {
		// The walk above should have caught everything decoding refuses.
		return Config{}, &Error{Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	cfg := f.apply(Defaults(), c)
	return cfg, c.asErrors()
}

// apply lays the file over the defaults and checks the result, adding what is wrong to c.
func (f File) apply(c Config, ck *checker) Config {
	var errs []string
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&c.Listen, f.Listen)
	set(&c.DB, f.DB)
	set(&c.LogLevel, f.LogLevel)
	set(&c.LogFormat, f.LogFormat)
	set(&c.HTTPListen, f.HTTPListen)
	if f.Metrics != nil {
		c.Metrics = *f.Metrics
	}
	if f.MetricsAuth != nil {
		c.MetricsAuth = *f.MetricsAuth
	}
	switch f.Durability {
	case "", "normal":
	case "full":
		c.FullSync = true
	default:
		errs = append(errs, fmt.Sprintf("durability must be normal or full, got %q", f.Durability))
	}
	if f.LeaseDuration != 0 {
		c.Broker.LeaseDuration = f.LeaseDuration
		if f.HeartbeatInterval == 0 {
			c.Broker.HeartbeatInterval = f.LeaseDuration / 3
		}
	}
	if f.HeartbeatInterval != 0 {
		c.Broker.HeartbeatInterval = f.HeartbeatInterval
	}
	if f.AttemptTimeout != 0 {
		c.Broker.AttemptTimeout = f.AttemptTimeout
	}
	if f.MaxPayloadBytes != 0 {
		c.MaxPayload = f.MaxPayloadBytes
	}
	if c.MaxPayload < 1 || c.MaxPayload > 64<<20 {
		errs = append(errs, fmt.Sprintf("max_payload_bytes must be 1..%d, got %d", 64<<20, c.MaxPayload))
	}
	if f.MaxResultBytes != 0 {
		c.Broker.MaxResultBytes = f.MaxResultBytes
	}
	c.Broker.AlwaysFatal = f.AlwaysFatal
	c.Broker.Retry = f.Retry.over(c.Broker.Retry)
	retryOK := true
	if err := c.Broker.Retry.Validate(); err != nil {
		errs, retryOK = append(errs, wrapPath("retry", err)...), false
	}
	breakerNames := goToYAML(reflect.TypeFor[BreakerFile]())
	checkBreaker := func(path string, bc breaker.Config, err error) {
		if err == nil {
			err = bc.Validate()
		}
		if err != nil {
			errs = append(errs, renamed(err, breaker.ErrInvalidConfig.Error()+": ", breakerNames, path))
		}
	}
	var err error
	c.Breakers.Default, err = f.Breaker.over(c.Breakers.Default)
	checkBreaker("breaker", c.Breakers.Default, err)
	for _, typ := range slices.Sorted(maps.Keys(f.JobTypes)) {
		tc := f.JobTypes[typ]
		if c.Broker.RetryByType == nil {
			c.Broker.RetryByType = map[string]retry.Policy{}
			c.Breakers.PerType = map[string]breaker.Config{}
		}
		p := tc.Retry.over(c.Broker.Retry)
		if err := p.Validate(); err != nil {
			errs, retryOK = append(errs, wrapPath("job_types."+typ+".retry", err)...), false
		}
		c.Broker.RetryByType[typ] = p
		bc, err := tc.Breaker.over(c.Breakers.Default)
		checkBreaker("job_types."+typ+".breaker", bc, err)
		c.Breakers.PerType[typ] = bc
	}
	errs = append(errs, f.applyRateLimits(&c)...)
	s := f.Storage
	if s.MaxTransientRetries != nil {
		c.Storage.MaxTransientRetries = *s.MaxTransientRetries
	}
	if s.TransientRetryBaseDelay != nil {
		c.Storage.TransientRetryBaseDelay = *s.TransientRetryBaseDelay
	}
	if s.CommandTimeout != nil {
		c.Storage.CommandTimeout = *s.CommandTimeout
	}
	if s.BusyTimeout != nil {
		c.BusyTimeout = *s.BusyTimeout
	}
	if c.BusyTimeout < 0 {
		errs = append(errs, fmt.Sprintf("storage.busy_timeout must not be negative, got %s", c.BusyTimeout))
	}
	if s.LeaderTimeout != nil {
		c.LeaderTimeout = *s.LeaderTimeout
		if err := CheckLeaderTimeout(c.LeaderTimeout); err != nil {
			errs = append(errs, "storage.leader_timeout "+err.Error())
		}
	}
	storageNames := goToYAML(reflect.TypeFor[StorageFile]())
	if err := c.Storage.Validate(); err != nil {
		for _, e := range splitJoined(err) {
			errs = append(errs, renamed(e, "storeretry: ", storageNames, "storage"))
		}
	}
	if f.Retention.Succeeded != nil {
		c.Broker.Retention.Succeeded = *f.Retention.Succeeded
	}
	if f.Retention.Dead != nil {
		c.Broker.Retention.Dead = *f.Retention.Dead
	}
	if f.Retention.Audit != nil {
		c.Broker.Retention.Audit = *f.Retention.Audit
	}
	var scheduleErrs []string
	c.Broker.Schedules, scheduleErrs = schedulesOf(f.Schedules)
	errs = append(errs, scheduleErrs...)
	// Set before the broker's check, which checks the rules with the rate limits.
	errs = append(errs, f.applyConcurrency(&c)...)
	if retryOK {
		// The broker checks the retry policies too; they were reported above with their place
		// in the file.
		if err := c.Broker.Validate(); err != nil {
			for _, e := range splitJoined(err) {
				errs = append(errs, e.Error())
			}
		}
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Sprintf("log_level must be debug, info, warn or error, got %q", c.LogLevel))
	}
	if err := CheckHTTPListen(c.HTTPListen); err != nil {
		errs = append(errs, fmt.Sprintf("http_listen %v", err))
	}
	errs = append(errs, f.applySecurity(&c)...)
	switch c.LogFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Sprintf("log_format must be text or json, got %q", c.LogFormat))
	}
	ck.errorsAt(errs)
	return c
}

func (r RetryFile) over(p retry.Policy) retry.Policy {
	if r.BaseDelay != nil {
		p.Base = *r.BaseDelay
	}
	if r.Multiplier != nil {
		p.Multiplier = *r.Multiplier
	}
	if r.MaxDelay != nil {
		p.MaxDelay = *r.MaxDelay
	}
	if r.JitterMax != nil {
		p.JitterMax = *r.JitterMax
	}
	if r.MaxAttempts != nil {
		p.MaxAttempts = *r.MaxAttempts
	}
	if r.MaxJobAge != nil {
		p.MaxJobAge = *r.MaxJobAge
	}
	return p
}

func (b BreakerFile) over(c breaker.Config) (breaker.Config, error) {
	if b.Mode != nil {
		m, ok := breaker.ParseMode(*b.Mode)
		if !ok {
			return c, fmt.Errorf("mode: %q is not ratio or count", *b.Mode)
		}
		c.Mode = m
	}
	// A key of the other mode would be ignored: say so rather than let it look like it works.
	ratioKey, countKey := "", ""
	switch {
	case b.FailureRatio != nil:
		ratioKey = "failure_ratio"
	case b.MinCalls != nil:
		ratioKey = "min_calls"
	case b.SamplingWindow != nil:
		ratioKey = "sampling_window"
	}
	switch {
	case b.Threshold != nil:
		countKey = "threshold"
	case b.Window != nil:
		countKey = "window"
	}
	if !c.Disabled && (b.Disabled == nil || !*b.Disabled) {
		switch {
		case c.Mode == breaker.ModeRatio && countKey != "":
			return c, fmt.Errorf("%s: applies to mode count only, and this breaker's mode is ratio (set mode: count, or use failure_ratio, min_calls and sampling_window)", countKey)
		case c.Mode == breaker.ModeCount && ratioKey != "":
			return c, fmt.Errorf("%s: applies to mode ratio only, and this breaker's mode is count (set mode: ratio, or use threshold and window)", ratioKey)
		}
	}
	if b.FailureRatio != nil {
		c.FailureRatio = *b.FailureRatio
	}
	if b.MinCalls != nil {
		c.MinCalls = *b.MinCalls
	}
	if b.SamplingWindow != nil {
		c.SamplingWindow = *b.SamplingWindow
	}
	if b.Threshold != nil {
		c.Threshold = *b.Threshold
	}
	if b.Window != nil {
		c.Window = *b.Window
	}
	if b.OpenFor != nil {
		c.OpenFor = *b.OpenFor
	}
	if b.HalfOpenProbes != nil {
		c.HalfOpenProbes = *b.HalfOpenProbes
	}
	if b.CloseAfter != nil {
		c.CloseAfter = *b.CloseAfter
	}
	if b.ProbeTimeout != nil {
		c.ProbeTimeout = *b.ProbeTimeout
	}
	if b.OpenOnFatal != nil {
		c.OpenOnFatal = *b.OpenOnFatal
	}
	if b.Disabled != nil {
		c.Disabled = *b.Disabled
	}
	if b.Count != nil {
		var kinds []breaker.FailureKind
		for _, name := range b.Count {
			k, ok := breaker.ParseFailureKind(name)
			if !ok {
				return c, fmt.Errorf("count: %q is not one of transient, fatal, lease_expired, timeout", name)
			}
			kinds = append(kinds, k)
		}
		c.Count = breaker.KindsOf(kinds...)
	}
	return c, nil
}

// CheckHTTPListen checks an HTTP listener address: host:port, or HTTPOff. The error reads
// after the setting's name.
func CheckHTTPListen(addr string) error {
	if addr == HTTPOff {
		return nil
	}
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return fmt.Errorf("must be host:port (such as 127.0.0.1:7071) or off, got %q", addr)
	}
	return nil
}

// CheckLeaderTimeout checks a leader timeout: at least three of the store's election intervals,
// so that a leader's heartbeat, written every interval, is missed several times over before
// another broker ends its session.
func CheckLeaderTimeout(d time.Duration) error {
	if least := 3 * postgres.DefaultElectionInterval; d < least {
		return fmt.Errorf("must be at least %s (three election intervals), got %s", least, d)
	}
	return nil
}
