package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"

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
