package web_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// The schedules page lists each schedule with its next and last fire times and its last job's
// state; pause (with a note, shown as text), trigger and resume take effect from the page.
func TestSchedulesPageInBrowser(t *testing.T) {
	t.Parallel()
	bb := setupBrowser(t)
	b := bb.b
	ctx := context.Background()
	if _, err := b.Admin.AddSchedule(ctx, &jobwirev1.AddScheduleRequest{Schedule: &jobwirev1.Schedule{Name: "nightly", Cron: "*/10 * * * *",
		TimeZone: "Europe/Paris", Type: "report", Overlap: jobwirev1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW_ALL}}); err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(10 * time.Minute)
	b.Broker.RunSchedules()

	bb.open(t, "schedules")
	row := `document.querySelector('tr[data-schedule="nightly"]')`
	bb.waitJS(t, "the schedule with its times and last job", row+` !== null && `+row+`.textContent.includes("*/10 * * * * (Europe/Paris)") && `+
		row+`.querySelector(".last-state").textContent === "PENDING" && `+row+`.querySelector('a[href^="#/job/"]') !== null`)
	bb.screenshot(t, "schedules")

	note := `<img src=x onerror="window.__pwned=1">`
	bb.do(t, "pause with a note",
		chromedp.SetValue(chromedp.CSS(`tr[data-schedule="nightly"] input`), note),
		chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll('tr[data-schedule="nightly"] button')].find(b => b.textContent === "Pause")`)))
	bb.waitJS(t, "the schedule shown paused with its note, as text", row+`.querySelector(".status").textContent === "paused `+`<img src=x onerror=\"window.__pwned=1\">" && window.__pwned === undefined`)
	if res, err := b.Admin.GetSchedule(ctx, &jobwirev1.GetScheduleRequest{Name: "nightly"}); err != nil || !res.GetSchedule().GetPaused() || res.GetSchedule().GetNote() != note {
		t.Fatalf("after the page's pause the schedule reads %v, %v", res, err)
	}

	before := `document.querySelector('tr[data-schedule="nightly"] a').textContent`
	first := eval[string](t, bb, before)
	bb.do(t, "trigger", chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll('tr[data-schedule="nightly"] button')].find(b => b.textContent === "Trigger")`)))
	bb.waitJS(t, "the triggered job as the last one", before+` !== "`+first+`"`)

	bb.do(t, "resume", chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll('tr[data-schedule="nightly"] button')].find(b => b.textContent === "Resume")`)))
	bb.waitJS(t, "the schedule shown active", row+`.querySelector(".status").textContent === "active"`)
}
