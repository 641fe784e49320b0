package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jobwire/jobwire/internal/app"
	"github.com/jobwire/jobwire/internal/config"
)

// runMigrate applies the database's pending migrations and exits, without serving. A broker
// applies them itself at start; this is for brokers whose database role may only use the tables
// (docs/deploying.md), which need the schema migrated first by a role that may change it.
func runMigrate(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	var db, cfgFile stringFlag
	envErr := addEnvFlags(e, fs, []serveVar{dbVar(&db), configVar(&cfgFile)})
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if envErr != nil {
		return envErr
	}
	if len(rest) > 0 {
		return usageErrorf("migrate takes no arguments, got %q", rest[0])
	}
	cfg, err := config.Load(cfgFile.v)
	if err != nil {
		return usageErrorf("%v", err)
	}
	if db.set {
		cfg.DB = db.v
	}
	if err := checkDB(cfg.DB, &db, &cfgFile); err != nil {
		return err
	}
	applied, err := app.Migrate(ctx, cfg.DB, slog.New(slog.DiscardHandler))
	for _, name := range applied {
		fmt.Fprintf(e.stdout, "applied %s\n", name)
	}
	if err != nil {
		return err
	}
	name := app.DBName(cfg.DB)
	if len(applied) == 0 {
		fmt.Fprintf(e.stdout, "%s is up to date; nothing to apply\n", name)
	} else {
		fmt.Fprintf(e.stdout, "%s is up to date; %s applied\n", name, count(len(applied), "migration"))
	}
	return nil
}
