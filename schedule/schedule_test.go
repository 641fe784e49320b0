package schedule

import (
	"slices"
	"testing"
	"time"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestParseFiresInItsTimeZone(t *testing.T) {
	t.Parallel()
	cases := []struct {
		cron, tz, from string
		want           []string
	}{
		{"0 9 * * *", "Europe/Paris", "2026-03-28T00:00:00Z", []string{"2026-03-28T08:00:00Z", "2026-03-29T07:00:00Z"}}, // summer time starts on the 29th
		{"*/30 * * * *", "", "2026-03-01T12:10:00Z", []string{"2026-03-01T12:30:00Z", "2026-03-01T13:00:00Z"}},
		{"@daily", "America/New_York", "2026-03-01T12:00:00Z", []string{"2026-03-02T05:00:00Z", "2026-03-03T05:00:00Z"}},
		{"@every 5m", "", "2026-03-01T12:00:00Z", []string{"2026-03-01T12:05:00Z", "2026-03-01T12:10:00Z"}},
		{"0 0 13 * 5", "", "2026-03-01T00:00:00Z", []string{"2026-03-06T00:00:00Z", "2026-03-13T00:00:00Z"}}, // Vixie rule: the 13th or a Friday
	}
	for _, c := range cases {
		tt, err := Parse(c.cron, c.tz)
		if err != nil {
			t.Fatalf("%s: %v", c.cron, err)
		}
		var got []string
		for n := at(c.from); len(got) < len(c.want); {
			n = tt.Next(n)
			got = append(got, n.Format(time.RFC3339))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s in %q from %s: %v, want %v", c.cron, c.tz, c.from, got, c.want)
		}
	}
}

func TestParseRefusesWhatCannotWork(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ cron, tz string }{
		{"* * * *", ""}, {"61 * * * *", ""}, {"@every 10ms", ""}, {"* * * * *", "Mars/Olympus"},
		{"CRON_TZ=UTC * * * * *", ""}, {"0 0 30 2 *", ""}, {"", ""},
	} {
		if _, err := Parse(c.cron, c.tz); err == nil {
			t.Errorf("Parse(%q, %q) accepted", c.cron, c.tz)
		}
	}
}

func times(ss ...string) []time.Time {
	var out []time.Time
	for _, s := range ss {
		out = append(out, at(s))
	}
	return out
}

func TestDecide(t *testing.T) {
	t.Parallel()
	every10 := func(o Overlap, c CatchUp) *Definition {
		return &Definition{Name: "s", Cron: "*/10 * * * *", Type: "t", Overlap: o, CatchUp: c, CatchUpWindow: time.Hour}
	}
	cases := []struct {
		name  string
		def   *Definition
		state State
		now   string
		want  Decision
	}{
		{"not due", every10(OverlapSkip, CatchUpLatest), State{Next: at("2026-03-01T12:10:00Z")}, "2026-03-01T12:09:59Z",
			Decision{Next: at("2026-03-01T12:10:00Z")}},
		{"on time", every10(OverlapSkip, CatchUpSkip), State{Next: at("2026-03-01T12:10:00Z")}, "2026-03-01T12:10:30Z",
			Decision{Fire: times("2026-03-01T12:10:00Z"), Next: at("2026-03-01T12:20:00Z")}},
		{"skip while running", every10(OverlapSkip, CatchUpLatest), State{Next: at("2026-03-01T12:10:00Z"), PreviousRunning: true}, "2026-03-01T12:10:00Z",
			Decision{Next: at("2026-03-01T12:20:00Z"), Skipped: 1}},
		{"allow all while running", every10(OverlapAllowAll, CatchUpLatest), State{Next: at("2026-03-01T12:10:00Z"), PreviousRunning: true}, "2026-03-01T12:10:00Z",
			Decision{Fire: times("2026-03-01T12:10:00Z"), Next: at("2026-03-01T12:20:00Z")}},
		{"buffer one while running", every10(OverlapBufferOne, CatchUpLatest), State{Next: at("2026-03-01T12:10:00Z"), PreviousRunning: true}, "2026-03-01T12:10:00Z",
			Decision{Next: at("2026-03-01T12:20:00Z"), Buffered: at("2026-03-01T12:10:00Z")}},
		{"buffer one keeps one", every10(OverlapBufferOne, CatchUpLatest), State{Next: at("2026-03-01T12:20:00Z"), Buffered: at("2026-03-01T12:10:00Z"), PreviousRunning: true}, "2026-03-01T12:20:00Z",
			Decision{Next: at("2026-03-01T12:30:00Z"), Buffered: at("2026-03-01T12:10:00Z"), Skipped: 1}},
		{"buffered goes once the previous finished", every10(OverlapBufferOne, CatchUpLatest), State{Next: at("2026-03-01T12:20:00Z"), Buffered: at("2026-03-01T12:10:00Z")}, "2026-03-01T12:15:00Z",
			Decision{Fire: times("2026-03-01T12:10:00Z"), Next: at("2026-03-01T12:20:00Z")}},
		{"cancel previous", every10(OverlapCancelPrevious, CatchUpLatest), State{Next: at("2026-03-01T12:10:00Z"), PreviousRunning: true}, "2026-03-01T12:10:00Z",
			Decision{Fire: times("2026-03-01T12:10:00Z"), Next: at("2026-03-01T12:20:00Z"), CancelPrevious: true}},
		{"missed, skipped", every10(OverlapAllowAll, CatchUpSkip), State{Next: at("2026-03-01T12:10:00Z")}, "2026-03-01T12:35:00Z",
			Decision{Next: at("2026-03-01T12:40:00Z"), Missed: 3}},
		{"missed, latest once", every10(OverlapAllowAll, CatchUpLatest), State{Next: at("2026-03-01T12:10:00Z")}, "2026-03-01T12:35:00Z",
			Decision{Fire: times("2026-03-01T12:30:00Z"), Next: at("2026-03-01T12:40:00Z"), Missed: 2}},
		{"missed, all within the window", every10(OverlapAllowAll, CatchUpAll), State{Next: at("2026-03-01T10:00:00Z")}, "2026-03-01T11:25:00Z",
			Decision{Fire: times("2026-03-01T10:30:00Z", "2026-03-01T10:40:00Z", "2026-03-01T10:50:00Z", "2026-03-01T11:00:00Z", "2026-03-01T11:10:00Z", "2026-03-01T11:20:00Z"),
				Next: at("2026-03-01T11:30:00Z"), Missed: 3}},
		{"missed, all, one at a time under skip", every10(OverlapSkip, CatchUpAll), State{Next: at("2026-03-01T11:00:00Z")}, "2026-03-01T11:25:00Z",
			Decision{Fire: times("2026-03-01T11:00:00Z"), Next: at("2026-03-01T11:30:00Z"), Skipped: 2}},
	}
	for _, c := range cases {
		tt, err := c.def.Validate()
		if err != nil {
			t.Fatal(err)
		}
		got := Decide(c.def, tt, c.state, at(c.now))
		if !slices.EqualFunc(got.Fire, c.want.Fire, time.Time.Equal) || !got.Next.Equal(c.want.Next) || !got.Buffered.Equal(c.want.Buffered) ||
			got.CancelPrevious != c.want.CancelPrevious || got.Missed != c.want.Missed || got.Skipped != c.want.Skipped {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

func TestDefinitionRoundTripsThroughItsEncoding(t *testing.T) {
	t.Parallel()
	d := &Definition{Name: "n", Cron: "@hourly", Type: "t", Overlap: OverlapBufferOne, CatchUp: CatchUpAll, Jitter: time.Second,
		Metadata: map[string]string{"a": "b"}, Payload: []byte(`{"x":1}`)}
	b, err := d.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(b)
	if err != nil || back.Overlap != OverlapBufferOne || back.CatchUp != CatchUpAll || back.Jitter != time.Second || string(back.Payload) != `{"x":1}` {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
}
