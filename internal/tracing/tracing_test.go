package tracing

import "testing"

func TestEnabledFollowsTheOTELVariables(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"nothing set: off", nil, false},
		{"exporter otlp", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{"an endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}, true},
		{"a traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4317"}, true},
		{"exporter none wins over an endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, false},
		{"SDK disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false},
	}
	for _, tt := range tests {
		if got := Enabled(func(k string) string { return tt.env[k] }); got != tt.want {
			t.Errorf("%s: Enabled = %v, want %v", tt.name, got, tt.want)
		}
	}
}
