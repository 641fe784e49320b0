package config

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/jobwire/jobwire/schedule"
)

// ScheduleFile declares a periodic schedule. The file is the truth for the schedules it
// declares: each start adds or updates them, and removes those it declared before and no
// longer does.
type ScheduleFile struct {
	Name string `yaml:"name"`
	// Cron is 5 fields, or @hourly, @daily, @weekly, @monthly, @yearly, "@every 10m".
	Cron     string `yaml:"cron"`
	TimeZone string `yaml:"time_zone"`
	Type     string `yaml:"type"`
	// Payload is any YAML value, stored as its JSON.
	Payload        PayloadFile       `yaml:"payload"`
	Queue          string            `yaml:"queue"`
	Priority       int               `yaml:"priority"`
	MaxAttempts    int               `yaml:"max_attempts"`
	AttemptTimeout time.Duration     `yaml:"attempt_timeout"`
	Metadata       map[string]string `yaml:"metadata"`
	Jitter         time.Duration     `yaml:"jitter"`
	// Overlap: skip (default), buffer_one, allow_all or cancel_previous.
	Overlap string `yaml:"overlap"`
	// CatchUp: latest (default), skip or all.
	CatchUp       string        `yaml:"catch_up"`
	CatchUpWindow time.Duration `yaml:"catch_up_window"`
}

// PayloadFile is a payload written as YAML (a mapping, a list, a string...) and kept as JSON.
type PayloadFile struct{ JSON []byte }

// UnmarshalYAML reads any YAML value as the JSON it stands for.
func (p *PayloadFile) UnmarshalYAML(n *yaml.Node) error {
	var v any
	if err := n.Decode(&v); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("payload on line %d cannot be written as JSON: %v", n.Line, err)
	}
	p.JSON = b
	return nil
}

// definitions are the schedules the file declares, and what is wrong in their policies (the
// broker checks the rest: broker.Config.Validate).
func schedulesOf(files []ScheduleFile) ([]schedule.Definition, []string) {
	var errs []string
	defs := make([]schedule.Definition, 0, len(files))
	for i, f := range files {
		overlap, err := schedule.ParseOverlap(strings.ReplaceAll(f.Overlap, "-", "_"))
		if err != nil {
			errs = append(errs, fmt.Sprintf("schedules[%d]: %v", i, err))
		}
		catchUp, err := schedule.ParseCatchUp(f.CatchUp)
		if err != nil {
			errs = append(errs, fmt.Sprintf("schedules[%d]: %v", i, err))
		}
		defs = append(defs, schedule.Definition{Name: f.Name, Cron: f.Cron, TimeZone: f.TimeZone, Type: f.Type,
			Payload: f.Payload.JSON, Queue: f.Queue, Priority: f.Priority, MaxAttempts: f.MaxAttempts,
			AttemptTimeout: f.AttemptTimeout, Metadata: f.Metadata, Jitter: f.Jitter, Overlap: overlap, CatchUp: catchUp,
			CatchUpWindow: f.CatchUpWindow})
	}
	return defs, errs
}
