package web_test

import (
	"fmt"
	"strings"
	"testing"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"google.golang.org/protobuf/proto"
)

// The job page shows a succeeded job's result, as text whatever it holds, and the newest
// progress its attempt reported.
func TestDashboardShowsResultAndProgressInBrowser(t *testing.T) {
	t.Parallel()
	bb := setupBrowser(t)
	b := bb.b
	w := b.Connect(brokertest.Hello("w1", 1, "report.build"))
	id := b.Enqueue(&jobwirev1.JobSpec{Type: "report.build"})
	a := w.Assignment()
	w.Started(a)
	w.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Progress{Progress: &jobwirev1.Progress{
		JobId: id, LeaseToken: a.GetLeaseToken(), Fraction: proto.Float64(0.6), Message: "part 3 of 5"}}})
	brokertest.WaitFor(t, "the progress stored", func() bool { return jobState(t, b, id).GetProgress() != nil })
	bb.open(t, fmt.Sprintf("job/%d", id))
	bb.waitJS(t, "the progress shown", `(document.getElementById("progress") || {}).textContent?.startsWith("60% part 3 of 5 (attempt 1,")`)

	result := `{"html":"<img src=x onerror=\"window.__pwned=1\">"}`
	w.Send(brokertest.SuccessMsg(brokertest.Ref(a), []byte(result)))
	w.Next()
	bb.open(t, fmt.Sprintf("job/%d", id))
	bb.waitJS(t, "the result shown", `document.getElementById("result") !== null`)
	if shown := eval[string](t, bb, `document.getElementById("result").textContent`); !strings.Contains(shown, `onerror=\"window.__pwned=1\"`) {
		t.Errorf("result shown as %q, want its text", shown)
	}
	if n := eval[int](t, bb, `document.querySelectorAll("main img").length`); n != 0 {
		t.Errorf("the result made %d elements", n)
	}
}
