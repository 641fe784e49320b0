package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobwire/jobwire/internal/app"
	"github.com/jobwire/jobwire/internal/config"
	"github.com/jobwire/jobwire/store/postgres"
)

// serveFlags are serve's command-line flags. Each may also come from a JOBWIRE_* environment
// variable; a flag wins over the variable, and both win over the configuration file. A new
// flag is one more field here, one more line in addServeFlags and one in apply.
type serveFlags struct {
	listen, db, config, durability, logLevel stringFlag
	httpListen, metrics                      stringFlag
	maxRetries                               intFlag
	baseDelay, commandTimeout, leaderTimeout durationFlag
	auditRetention                           durationFlag
	security                                 securityFlags

	envErr error // the first bad JOBWIRE_* value
}

// serveVar is one serve flag with its environment variable.
type serveVar struct {
	v     envValue
	name  string
	env   string
	usage string
}

// addServeFlags registers serve's flags with their environment defaults. A bad value in the
// environment is kept in envErr and reported after the command line is parsed, so that -h
// still works.
func addServeFlags(e *env, fs *flag.FlagSet) *serveFlags {
	sf := &serveFlags{maxRetries: newIntFlag(), baseDelay: newDurationFlag(), commandTimeout: newDurationFlag(),
		leaderTimeout: newDurationFlag(), auditRetention: newDurationFlag()}
	sf.auditRetention.parse = parseDuration
	vars := []serveVar{
		{&sf.listen, "listen", "JOBWIRE_LISTEN", "address to listen on, host:port (default 127.0.0.1:7070)"},
		dbVar(&sf.db),
		configVar(&sf.config),
		{&sf.durability, "durability", "JOBWIRE_DURABILITY", "normal or full"},
		{&sf.logLevel, "log-level", "JOBWIRE_LOG_LEVEL", "debug, info, warn or error"},
		{&sf.httpListen, "http-listen", "JOBWIRE_HTTP_LISTEN",
			"address of the HTTP listener for /metrics, /healthz, /readyz and the dashboard, host:port or off (default 127.0.0.1:7071)"},
		{&sf.metrics, "metrics", "JOBWIRE_METRICS", "Prometheus metrics on /metrics: on or off (default on)"},
		{&sf.maxRetries, "max-transient-retries", "JOBWIRE_MAX_TRANSIENT_RETRIES",
			"times a storage operation is re-run when the database is busy or locked (default 3)"},
		{&sf.baseDelay, "transient-retry-base-delay", "JOBWIRE_TRANSIENT_RETRY_BASE_DELAY",
			"wait before the first storage retry, doubled for each further one (default 200ms)"},
		{&sf.commandTimeout, "command-timeout", "JOBWIRE_COMMAND_TIMEOUT",
			"longest one storage command may run before it is interrupted and retried (default 30s)"},
		{&sf.leaderTimeout, "leader-timeout", "JOBWIRE_LEADER_TIMEOUT",
			"with PostgreSQL, how long the leader of several brokers may go silent before another takes over (default 5s, at least 3s)"},
		{&sf.auditRetention, "audit-retention", "JOBWIRE_AUDIT_RETENTION",
			"how long the audit trail of operator actions is kept, such as 90d or 2160h (default 90d, at least 1m)"},
	}
	vars = append(vars, sf.security.vars(e)...)
	sf.envErr = addEnvFlags(e, fs, vars)
	return sf
}

// addEnvFlags registers vars with fs, each set first from its environment variable, and
// returns the first bad value found there: it is reported after the command line is parsed,
// so that -h still works.
func addEnvFlags(e *env, fs *flag.FlagSet, vars []serveVar) error {
	var envErr error
	for _, v := range vars {
		if s := e.getenv(v.env); s != "" {
			if err := v.v.Set(s); err == nil {
				v.v.markFrom(v.env)
			} else if envErr == nil {
				envErr = usageErrorf("%s=%q: %v", v.env, s, err)
			}
		}
		fs.Var(v.v, v.name, v.usage+" (env "+v.env+")")
	}
	return envErr
}

// dbVar is the --db flag, serve's and migrate's.
func dbVar(db *stringFlag) serveVar {
	return serveVar{db, "db", "JOBWIRE_DB", "SQLite database file, whose directory must exist, or a postgres:// URL (default ./jobwire.db)"}
}

// configVar is the --config flag, serve's and migrate's.
func configVar(config *stringFlag) serveVar {
	return serveVar{config, "config", "JOBWIRE_CONFIG", "YAML configuration file (optional)"}
}

// envValue is a serve flag: a flag.Value that remembers whether it was set and from where.
type envValue interface {
	flag.Value
	markFrom(source string)
}

// origin says whether a flag was set (on the command line or from the environment) and where
// from, for messages.
type origin struct{ from string }

func (o *origin) markFrom(source string) { o.from = source }

// setBy names where the value came from, "--name" when on the command line.
func (o *origin) setBy(name string) string {
	if o.from == "" {
		return "--" + name
	}
	return o.from
}

// optFlag is a serve flag of type T that records whether it was set, so that an absent flag
// leaves the configuration file's value (or the default) in place. The zero value is a string
// flag; other types are made by their constructor, which sets kind and parse.
type optFlag[T any] struct {
	origin
	v     T
	set   bool
	kind  string // the type shown in -h; "" for string
	parse func(string) (T, error)
}

func (f *optFlag[T]) typeName() string {
	if f.kind == "" {
		return "string"
	}
	return f.kind
}

func (f *optFlag[T]) String() string {
	if !f.set {
		return ""
	}
	return fmt.Sprint(f.v)
}

func (f *optFlag[T]) Set(s string) error {
	var v T
	if f.parse == nil {
		text, ok := any(s).(T)
		if !ok {
			return fmt.Errorf("this %T flag has no parser", f.v)
		}
		v = text
	} else {
		var err error
		if v, err = f.parse(s); err != nil {
			return err
		}
	}
	f.v, f.set, f.from = v, true, ""
	return nil
}

type (
	stringFlag   = optFlag[string]
	intFlag      = optFlag[int]
	durationFlag = optFlag[time.Duration]
)

func newIntFlag() intFlag {
	return intFlag{kind: "int", parse: func(s string) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return 0, errors.New("must be a whole number, zero or more")
		}
		return n, nil
	}}
}

func newDurationFlag() durationFlag {
	return durationFlag{kind: "duration", parse: func(s string) (time.Duration, error) {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return 0, errors.New("must be a duration such as 200ms, 30s or 1m, zero or more")
		}
		return d, nil
	}}
}

// runServe starts the broker and serves until ctx ends (SIGINT or SIGTERM). Everything that
// can be checked is checked before the database is opened, so that a mistake on the command
// line neither creates nor migrates a database.
func runServe(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	sf := addServeFlags(e, fs)
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if sf.envErr != nil {
		return sf.envErr
	}
	if len(rest) > 0 {
		return usageErrorf("serve takes no arguments, got %q", rest[0])
	}
	cfg, err := config.Load(sf.config.v)
	if err != nil {
		return usageErrorf("%v", err)
	}
	if err := sf.apply(&cfg); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return usageErrorf("%s must be debug, info, warn or error, got %q", sf.logLevel.setBy("log-level"), cfg.LogLevel)
	}
	hopts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(e.stderr, hopts)
	if cfg.LogFormat == "json" {
		h = slog.NewJSONHandler(e.stderr, hopts)
	}
	err = app.Run(ctx, cfg, slog.New(h), nil)
	var (
		le *app.ListenError
		se *app.SetupError
	)
	if errors.As(err, &le) {
		if le.HTTP {
			return usageErrorf("%v; choose another %s, or off", le, sf.httpListen.setBy("http-listen"))
		}
		return usageErrorf("%v; choose another %s", le, sf.listen.setBy("listen"))
	}
	if errors.As(err, &se) {
		return usageErrorf("%v", se)
	}
	return err
}

// apply overrides cfg with the flags that are set and checks what the flags and the file
// decided together: the listening address, the database's directory, the storage options.
func (sf *serveFlags) apply(cfg *config.Config) error {
	if sf.listen.set {
		cfg.Listen = sf.listen.v
	}
	if sf.db.set {
		cfg.DB = sf.db.v
	}
	if sf.logLevel.set {
		cfg.LogLevel = sf.logLevel.v
	}
	switch {
	case !sf.durability.set:
	case sf.durability.v == "normal":
		cfg.FullSync = false
	case sf.durability.v == "full":
		cfg.FullSync = true
	default:
		return usageErrorf("%s must be normal or full, got %q", sf.durability.setBy("durability"), sf.durability.v)
	}
	switch {
	case !sf.metrics.set:
	case sf.metrics.v == "on":
		cfg.Metrics = true
	case sf.metrics.v == "off":
		cfg.Metrics = false
	default:
		return usageErrorf("%s must be on or off, got %q", sf.metrics.setBy("metrics"), sf.metrics.v)
	}
	if sf.httpListen.set {
		cfg.HTTPListen = sf.httpListen.v
		if cfg.HTTPListen != config.HTTPOff {
			if err := checkListenAddr(cfg.HTTPListen); err != nil {
				return usageErrorf("%s %v, or off", sf.httpListen.setBy("http-listen"), err)
			}
		}
	}
	if sf.maxRetries.set {
		cfg.Storage.MaxTransientRetries = sf.maxRetries.v
	}
	if sf.baseDelay.set {
		cfg.Storage.TransientRetryBaseDelay = sf.baseDelay.v
	}
	if sf.commandTimeout.set {
		if sf.commandTimeout.v == 0 {
			return usageErrorf("%s must be positive, got 0s", sf.commandTimeout.setBy("command-timeout"))
		}
		cfg.Storage.CommandTimeout = sf.commandTimeout.v
	}
	if sf.leaderTimeout.set {
		if err := config.CheckLeaderTimeout(sf.leaderTimeout.v); err != nil {
			return usageErrorf("%s %v", sf.leaderTimeout.setBy("leader-timeout"), err)
		}
		cfg.LeaderTimeout = sf.leaderTimeout.v
	}
	if sf.auditRetention.set {
		if sf.auditRetention.v < time.Minute {
			return usageErrorf("%s must be at least 1m, got %s", sf.auditRetention.setBy("audit-retention"), sf.auditRetention.v)
		}
		cfg.Broker.Retention.Audit = sf.auditRetention.v
	}
	if cfg.LeaderTimeout != 0 && !postgres.IsURL(cfg.DB) {
		return usageErrorf("a leader timeout applies only to several brokers on a PostgreSQL database; %q is a SQLite file", cfg.DB)
	}
	listenFrom := "listen in the configuration file"
	if sf.listen.set || sf.config.v == "" {
		listenFrom = sf.listen.setBy("listen")
	}
	if err := checkListenAddr(cfg.Listen); err != nil {
		return usageErrorf("%s %v", listenFrom, err)
	}
	if err := checkDB(cfg.DB, &sf.db, &sf.config); err != nil {
		return err
	}
	return sf.security.apply(cfg)
}

// checkDB checks the database db names (checkDBPath) and names where it came from when it is
// wrong: the --db flag or JOBWIRE_DB, else the configuration file given with config.
func checkDB(db string, dbFlag, config *stringFlag) error {
	if err := checkDBPath(db); err != nil {
		from := "db in the configuration file"
		if dbFlag.set || config.v == "" {
			from = dbFlag.setBy("db")
		}
		return usageErrorf("%s %v", from, err)
	}
	return nil
}

// checkListenAddr checks a listening address: host:port, where the host may be empty (every
// interface) and the port 0 (any free one).
func checkListenAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port, e.g. 127.0.0.1:7070 or :7070", addr)
	}
	if host != "" && net.ParseIP(host) == nil {
		if _, err := net.LookupHost(host); err != nil {
			return fmt.Errorf("%q: host %q is not an IP address or a name this machine resolves", addr, host)
		}
	}
	if err := checkPort(port, true); err != nil {
		return fmt.Errorf("%q: %w", addr, err)
	}
	return nil
}

// checkDBPath checks that the database file can be made where it is asked for: its directory
// exists, and the path is not a directory itself; and that a URL is a PostgreSQL one, not one of
// another database (mysql://) that would otherwise be taken for a file name. SQLite would otherwise fail with "unable to
// open database file", which names neither.
func checkDBPath(path string) error {
	if path == "" {
		return errors.New("is empty; give a file path such as ./jobwire.db or a postgres:// URL")
	}
	if postgres.IsURL(path) {
		if _, err := pgxpool.ParseConfig(path); err != nil {
			return errors.New("is not a PostgreSQL URL that can be read, e.g. postgres://jobwire@db.example:5432/jobwire")
		}
		return nil
	}
	if scheme, _, ok := strings.Cut(path, "://"); ok && isURLScheme(scheme) {
		return fmt.Errorf("%q is a %s:// URL, which Jobwire does not support; give a SQLite file path such as ./jobwire.db or a postgres:// (or postgresql://) URL", path, scheme)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%q is a directory; give a file path such as %s", path, filepath.Join(path, "jobwire.db"))
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%q: directory %q does not exist; create it first", path, dir)
	case err != nil:
		return fmt.Errorf("%q: cannot use directory %q: %v", path, dir, errors.Unwrap(err))
	case !fi.IsDir():
		return fmt.Errorf("%q: %q is not a directory", path, dir)
	}
	return nil
}

// isURLScheme reports whether s can be a URL's scheme (RFC 3986: a letter, then letters, digits,
// "+", "-" or "."), so that "mysql" in "mysql://..." is one and "./data" in "./data://x" is not.
func isURLScheme(s string) bool {
	for i, r := range s {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z':
		case i > 0 && ('0' <= r && r <= '9' || r == '+' || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return s != ""
}
