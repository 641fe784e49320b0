package web_test

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// The Audit page lists operator actions newest first, those done in the dashboard marked as
// its own, and filters them by action.
func TestDashboardAuditPage(t *testing.T) {
	t.Parallel()
	bb := setupBrowser(t)
	b := bb.b
	if _, err := b.Admin.ForceBreaker(context.Background(), &jobwirev1.ForceBreakerRequest{Type: "report.build",
		State: jobwirev1.BreakerState_BREAKER_STATE_OPEN}); err != nil {
		t.Fatal(err)
	}
	b.Enqueue(&jobwirev1.JobSpec{Type: "email.send", Queue: "mail"}) // creates the queue

	bb.open(t, "queues")
	row := `tr[data-queue="mail"]`
	bb.do(t, "pause", chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll('`+row+` button')].find(b => b.textContent === "Pause")`)))
	bb.waitJS(t, "the queue shown paused", `document.querySelector('`+row+`').textContent.includes("paused")`)

	bb.open(t, "audit")
	bb.screenshot(t, "audit")
	rows := `[...document.querySelectorAll("#audit-list tbody tr")]`
	if got := eval[[]string](t, bb, rows+`.map(r => r.dataset.action)`); len(got) != 2 || got[0] != "queue.pause" || got[1] != "breaker.force" {
		t.Fatalf("audit rows %v, want the pause, then the force before it", got)
	}
	pause := eval[[]string](t, bb, `[...`+rows+`[0].querySelectorAll("td")].map(c => c.textContent)`)
	if len(pause) != 8 || pause[1] != "anonymous" || !strings.HasPrefix(pause[2], "dashboard 127.0.0.1:") || pause[4] != "mail" {
		t.Errorf("the pause's row %q, want it by anonymous from the dashboard on queue mail", pause)
	}
	force := eval[[]string](t, bb, `[...`+rows+`[1].querySelectorAll("td")].map(c => c.textContent)`)
	if len(force) != 8 || !strings.HasPrefix(force[2], "api ") || force[4] != "report.build" || force[6] != "state=OPEN" {
		t.Errorf("the force's row %q, want it from the API on report.build, state=OPEN", force)
	}

	bb.do(t, "filter by action", chromedp.SetValue(chromedp.CSS(`select[aria-label="action"]`), "breaker.force"),
		chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll("button")].find(b => b.textContent === "Filter")`)))
	bb.waitJS(t, "only the force listed", rows+`.length === 1 && `+rows+`[0].dataset.action === "breaker.force"`)
}
