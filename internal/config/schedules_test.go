package config

import (
	"strings"
	"testing"
	"time"

	"github.com/jobwire/jobwire/schedule"
)

func TestParseReadsSchedules(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(`
schedules:
  - name: nightly-report
    cron: "0 2 * * *"
    time_zone: Europe/Paris
    type: report.build
    payload: {customer: all, days: [1, 7]}
    queue: reports
    priority: 3
    max_attempts: 2
    attempt_timeout: 10m
    metadata: {team: billing}
    jitter: 30s
    overlap: buffer-one
    catch_up: all
    catch_up_window: 6h
  - name: heartbeat
    cron: "@every 5m"
    type: ping
`))
	if err != nil {
		t.Fatal(err)
	}
	defs := cfg.Broker.Schedules
	if len(defs) != 2 {
		t.Fatalf("%d schedules, want 2", len(defs))
	}
	d := defs[0]
	if d.Name != "nightly-report" || d.Cron != "0 2 * * *" || d.TimeZone != "Europe/Paris" || d.Type != "report.build" ||
		string(d.Payload) != `{"customer":"all","days":[1,7]}` || d.Queue != "reports" || d.Priority != 3 || d.MaxAttempts != 2 ||
		d.AttemptTimeout != 10*time.Minute || d.Metadata["team"] != "billing" || d.Jitter != 30*time.Second ||
		d.Overlap != schedule.OverlapBufferOne || d.CatchUp != schedule.CatchUpAll || d.CatchUpWindow != 6*time.Hour {
		t.Fatalf("read %+v", d)
	}
	if defs[1].Overlap != schedule.OverlapSkip || defs[1].CatchUp != schedule.CatchUpLatest || defs[1].Payload != nil {
		t.Fatalf("defaults read %+v", defs[1])
	}
}

func TestParseRefusesBadSchedules(t *testing.T) {
	t.Parallel()
	for doc, want := range map[string]string{
		"schedules: [{name: a, cron: '* * *', type: t}]":                                       "5 fields",
		"schedules: [{name: a, cron: '@daily', type: t, overlap: never}]":                      "overlap \"never\"",
		"schedules: [{name: a, cron: '@daily', type: t, catch_up: maybe}]":                     "catch_up \"maybe\"",
		"schedules: [{name: a, cron: '@daily'}]":                                               "type is required",
		"schedules: [{name: a, cron: '@daily', type: t, time_zone: Nowhere}]":                  "IANA",
		"schedules: [{name: a, cron: '@daily', type: t}, {name: a, cron: '@hourly', type: t}]": "declared twice",
		"schedules: [{name: a, crn: '@daily', type: t}]":                                       "unknown key \"crn\"",
	} {
		_, err := Parse([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want an error naming %q", doc, err, want)
		}
	}
}

// The example the docs run loads.
func TestExampleSchedulesLoad(t *testing.T) {
	t.Parallel()
	cfg, err := Load("../../examples/config/schedules.yaml")
	if err != nil || len(cfg.Broker.Schedules) != 2 {
		t.Fatalf("Load = %d schedules, %v", len(cfg.Broker.Schedules), err)
	}
}
