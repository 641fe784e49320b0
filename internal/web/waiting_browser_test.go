package web_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// clickButton clicks the button labelled label inside the element sel.
func clickButton(sel, label string) chromedp.Action[chromedp.Void] {
	return chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll('` + sel + ` button')].find(b => b.textContent === ` + jsString(label) + `)`))
}

// A scheduled job's page changes its priority, runs it now and deletes it; the jobs list runs
// a scheduled job now from its row. Each action is in the audit trail as the dashboard's.
func TestDashboardWaitingJobActions(t *testing.T) {
	t.Parallel()
	bb := setupBrowser(t)
	b := bb.b
	later := func() int64 {
		return b.Enqueue(&jobwirev1.JobSpec{Type: "report.build", Payload: []byte(`{}`),
			Schedule: &jobwirev1.JobSpec_Delay{Delay: durationpb.New(time.Hour)}})
	}
	id, other := later(), later()

	bb.open(t, fmt.Sprintf("job/%d", id))
	bb.screenshot(t, "waiting-job")
	bb.do(t, "set the priority", chromedp.SetValue(chromedp.CSS(fmt.Sprintf(`input[aria-label="priority of job %d"]`, id)), "12"),
		clickButton(".waiting-actions", "Set priority"))
	bb.waitJS(t, "the priority shown", `[...document.querySelectorAll("dd")].some(d => d.textContent === "12")`)
	bb.do(t, "run now", clickButton(".waiting-actions", "Run now"))
	bb.waitJS(t, "the job shown PENDING", `document.querySelector(".badge").textContent === "PENDING"`)
	if j := jobState(t, b, id); j.GetState() != jobwirev1.JobState_JOB_STATE_PENDING || j.GetPriority() != 12 {
		t.Fatalf("job %d is %s with priority %d, want PENDING with 12", id, j.GetState(), j.GetPriority())
	}
	bb.do(t, "delete", clickButton(".waiting-actions", "Delete"))
	bb.waitJS(t, "back on the jobs list", `location.hash.startsWith("#/jobs")`)
	if _, err := b.Producer.GetJob(context.Background(), &jobwirev1.GetJobRequest{Id: id}); status.Code(err) != codes.NotFound {
		t.Fatalf("job %d after delete: %v, want NOT_FOUND", id, err)
	}

	bb.open(t, "jobs")
	row := fmt.Sprintf(`tr[data-job="%d"]`, other)
	bb.do(t, "run now from the list", clickButton(row, "Run now"))
	bb.waitJS(t, "the row shown PENDING", `document.querySelector('`+row+`').dataset.state === "PENDING"`)

	res, err := b.Admin.ListAuditEvents(context.Background(), &jobwirev1.ListAuditEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range res.GetEvents() {
		actions = append(actions, e.GetAction()+" "+e.GetSource())
	}
	want := []string{"job.run_now dashboard", "job.delete dashboard", "job.run_now dashboard", "job.priority dashboard"}
	if fmt.Sprint(actions) != fmt.Sprint(want) {
		t.Fatalf("audit trail %v, want %v", actions, want)
	}
}
