package stages

import (
	"fmt"
	"testing"
	"time"
)

func TestMarksLandInTheTraceBegun(t *testing.T) {
	Mark(Call) // no trace: nothing to land in, nothing happens
	tr := Begin()
	defer End()
	Mark(Call)
	first := tr.at[Call].Load()
	time.Sleep(time.Millisecond) // the clock must move for the second mark to differ
	Mark(Call)
	if tr.at[Call].Load() != first {
		t.Error("a second mark of a point replaced the first")
	}
	Mark(Return)
	d, ok := tr.Between(Call, Return)
	if !ok || d < time.Millisecond {
		t.Errorf("Between(Call, Return) = %v, %v; want at least 1ms", d, ok)
	}
	tests := []struct {
		name     string
		from, to Point
	}{
		{"backwards", Return, Call},
		{"to a point not passed", Call, Handler},
		{"from a point not passed", Handler, Return},
	}
	for _, tt := range tests {
		if d, ok := tr.Between(tt.from, tt.to); ok {
			t.Errorf("%s: Between(%v, %v) = %v, want not ok", tt.name, tt.from, tt.to, d)
		}
	}
	End()
	Mark(Handler)
	if tr.Passed(Handler) {
		t.Error("a mark after End landed in the ended trace")
	}
}

// A point other work passes too is the traced request's only after the point before it.
func TestMarkAfterWaitsForThePointBefore(t *testing.T) {
	tr := Begin()
	defer End()
	if MarkAfter(Handler, Queued) || tr.Passed(Queued) {
		t.Fatal("Queued marked before the handler")
	}
	Mark(Handler)
	if !MarkAfter(Handler, Queued) {
		t.Fatal("Queued not marked after the handler")
	}
	if _, ok := tr.Between(Handler, Queued); !ok {
		t.Fatal("handler to queued not measured")
	}
}

func TestPointNames(t *testing.T) {
	for p := range numPoints {
		if p.String() == "" || p.String() == "unknown" {
			t.Errorf("point %d has no name", p)
		}
	}
	if got := numPoints.String(); got != "unknown" {
		t.Errorf("numPoints.String() = %q, want unknown", got)
	}
}

// One request traced from the producer's call to its return.
func Example() {
	t := Begin()
	defer End()
	Mark(Call)
	// ... the request passes the points the broker and server mark ...
	Mark(Return)
	_, ok := t.Between(Call, Return)
	fmt.Println(ok, t.Passed(Handler))
	// Output: true false
}
