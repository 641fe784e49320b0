package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/jobwire/jobwire/internal/app"
	"github.com/jobwire/jobwire/internal/config"
)

// runServe starts the broker and serves until ctx ends (SIGINT or SIGTERM). Every flag can
// also come from a JOBWIRE_* environment variable; a flag wins over the variable, and both win
// over the configuration file.
func runServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	listen := fs.String("listen", os.Getenv("JOBWIRE_LISTEN"), "address to listen on (default 127.0.0.1:7070, env JOBWIRE_LISTEN)")
	db := fs.String("db", os.Getenv("JOBWIRE_DB"), "SQLite database file (default ./jobwire.db, env JOBWIRE_DB)")
	cfgPath := fs.String("config", os.Getenv("JOBWIRE_CONFIG"), "YAML configuration file (optional, env JOBWIRE_CONFIG)")
	durability := fs.String("durability", os.Getenv("JOBWIRE_DURABILITY"), "normal or full (env JOBWIRE_DURABILITY)")
	logLevel := fs.String("log-level", os.Getenv("JOBWIRE_LOG_LEVEL"), "debug, info, warn or error (env JOBWIRE_LOG_LEVEL)")
	var sf storageFlags
	fs.StringVar(&sf.maxRetries, "max-transient-retries", os.Getenv("JOBWIRE_MAX_TRANSIENT_RETRIES"),
		"times a storage operation is re-run when the database is busy or locked (default 3, env JOBWIRE_MAX_TRANSIENT_RETRIES)")
	fs.StringVar(&sf.baseDelay, "transient-retry-base-delay", os.Getenv("JOBWIRE_TRANSIENT_RETRY_BASE_DELAY"),
		"wait before the first storage retry, doubled for each further one (default 200ms, env JOBWIRE_TRANSIENT_RETRY_BASE_DELAY)")
	fs.StringVar(&sf.commandTimeout, "command-timeout", os.Getenv("JOBWIRE_COMMAND_TIMEOUT"),
		"longest one storage command may run before it is interrupted and retried (default 30s, env JOBWIRE_COMMAND_TIMEOUT)")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErrorf("serve takes no arguments, got %q", rest[0])
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return usageErrorf("%v", err)
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if *db != "" {
		cfg.DB = *db
	}
	switch *durability {
	case "":
	case "normal":
		cfg.FullSync = false
	case "full":
		cfg.FullSync = true
	default:
		return usageErrorf("--durability must be normal or full, got %q", *durability)
	}
	if err := sf.apply(&cfg); err != nil {
		return err
	}
	if *logLevel != "" {
		cfg.LogLevel = *logLevel
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return usageErrorf("--log-level must be debug, info, warn or error, got %q", cfg.LogLevel)
	}
	hopts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(os.Stderr, hopts)
	if cfg.LogFormat == "json" {
		h = slog.NewJSONHandler(os.Stderr, hopts)
	}
	return app.Run(ctx, cfg, slog.New(h), nil)
}

// storageFlags are the storage retry settings given on the command line or in the environment,
// as typed; "" leaves the configuration file's value (or the default) in place.
type storageFlags struct {
	maxRetries     string
	baseDelay      string
	commandTimeout string
}

// apply overrides cfg's storage retry options with the flags that are set and checks the
// result, so that a bad value stops the broker before it opens the database.
func (sf storageFlags) apply(cfg *config.Config) error {
	if sf.maxRetries != "" {
		n, err := strconv.Atoi(sf.maxRetries)
		if err != nil || n < 0 {
			return usageErrorf("--max-transient-retries must be a whole number, zero or more, got %q", sf.maxRetries)
		}
		cfg.Storage.MaxTransientRetries = n
	}
	if sf.baseDelay != "" {
		d, err := time.ParseDuration(sf.baseDelay)
		if err != nil || d < 0 {
			return usageErrorf("--transient-retry-base-delay must be a duration such as 200ms, zero or more, got %q", sf.baseDelay)
		}
		cfg.Storage.TransientRetryBaseDelay = d
	}
	if sf.commandTimeout != "" {
		d, err := time.ParseDuration(sf.commandTimeout)
		if err != nil || d <= 0 {
			return usageErrorf("--command-timeout must be a positive duration such as 30s, got %q", sf.commandTimeout)
		}
		cfg.Storage.CommandTimeout = d
	}
	return nil
}
