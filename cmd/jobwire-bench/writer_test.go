package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobwire/jobwire/client"
)

func TestMetricValue(t *testing.T) {
	t.Parallel()
	const text = `# HELP jobwire_storage_commit_duration_seconds How long each storage commit took.
# TYPE jobwire_storage_commit_duration_seconds histogram
jobwire_storage_commit_duration_seconds_bucket{le="0.001"} 3
jobwire_storage_commit_duration_seconds_sum_other 9
jobwire_storage_commit_duration_seconds_sum 0.0425
jobwire_storage_commit_duration_seconds_count 4
`
	tests := []struct {
		name, text, metric string
		want               float64
		ok                 bool
		wantErr            bool
	}{
		{name: "found", text: text, metric: writerMetric, want: 0.0425, ok: true},
		{name: "a name it only begins", text: text, metric: "jobwire_storage_commit_duration_seconds", ok: false},
		{name: "absent", text: text, metric: "jobwire_nothing", ok: false},
		{name: "no metrics at all", text: "", metric: writerMetric, ok: false},
		{name: "not a number", text: writerMetric + " many\n", metric: writerMetric, wantErr: true},
	}
	for _, tt := range tests {
		v, ok, err := metricValue(strings.NewReader(tt.text), tt.metric)
		if (err != nil) != tt.wantErr || ok != tt.ok || v != tt.want {
			t.Errorf("%s: metricValue = %v, %v, %v; want %v, %v, error %v", tt.name, v, ok, err, tt.want, tt.ok, tt.wantErr)
		}
	}
}

// A real broker's writer shows as busy once it has written, read from the broker's metrics at
// the address its log announces; with its metrics off the share is not measured (0) rather
// than measured as idle.
func TestWriterMeterReadsALiveBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the broker")
	}
	dir := t.TempDir()
	bin, err := buildBroker(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, metrics := range []string{"on", "off"} {
		cfg := &benchConfig{brokerBin: bin, Durability: "normal", Metrics: metrics}
		b, err := startBroker(t.Context(), cfg, dir, filepath.Join(dir, metrics+".db"), "writer-"+metrics)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.stop() })
		m := meterWriters([]*brokerProc{b})
		c, err := client.Dial(t.Context(), b.addr)
		if err != nil {
			t.Fatal(err)
		}
		for range 20 {
			if _, err := c.Enqueue(t.Context(), "noop", nil); err != nil {
				t.Fatal(err)
			}
		}
		_ = c.Close()
		busy := m.busy()
		switch {
		case metrics == "on" && (b.http == "" || busy <= 0 || busy > 100):
			t.Errorf("metrics on: HTTP at %q, writer busy %.3f%%; want an address and a share above 0 and at most 100", b.http, busy)
		case metrics == "off" && busy != 0:
			t.Errorf("metrics off: writer busy %.3f%%, want 0 (not measured)", busy)
		}
	}
}
