package web_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/chromedp/chromedp"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// The Batches page lists batches newest first with their counts and callbacks, and filters them
// by state.
func TestDashboardBatchesPage(t *testing.T) {
	t.Parallel()
	bb := setupBrowser(t)
	b := bb.b
	ctx := context.Background()
	if _, err := b.Producer.EnqueueBatch(ctx, &jobwirev1.EnqueueBatchRequest{
		Batch: &jobwirev1.BatchOptions{Description: "nightly import", OnComplete: &jobwirev1.JobSpec{Type: "report"}},
		Jobs:  []*jobwirev1.JobSpec{{Type: "row"}, {Type: "row"}}}); err != nil {
		t.Fatal(err)
	}
	open, err := b.Producer.CreateBatch(ctx, &jobwirev1.CreateBatchRequest{Batch: &jobwirev1.BatchOptions{Description: "open one"}})
	if err != nil {
		t.Fatal(err)
	}
	w := b.Connect(brokertest.Hello("w1", 1, "row"))
	for range 2 {
		a := w.Assignment()
		w.Started(a)
		w.Report(brokertest.Ref(a), nil)
	}

	bb.open(t, "batches")
	bb.screenshot(t, "batches")
	rows := `[...document.querySelectorAll("#batch-list tbody tr")]`
	if got := eval[[]string](t, bb, rows+`.map(r => r.dataset.state)`); len(got) != 2 || got[0] != "OPEN" || got[1] != "COMPLETE" {
		t.Fatalf("batch rows %v, want the open one, then the complete one", got)
	}
	done := eval[[]string](t, bb, `[...`+rows+`[1].querySelectorAll("td")].map(c => c.textContent)`)
	if len(done) != 10 || done[1] != "nightly import" || done[3] != " 2 / 2" || done[4] != "2" || done[8][:7] != "report " {
		t.Errorf("the complete batch's row %q", done)
	}
	bb.do(t, "filter open", chromedp.SetValue(chromedp.CSS(`select[aria-label="state"]`), "BATCH_STATE_OPEN"))
	eval[bool](t, bb, `document.querySelector('select[aria-label="state"]').dispatchEvent(new Event("change"))`)
	bb.waitJS(t, "only the open batch listed", rows+`.length === 1 && `+rows+`[0].dataset.batch === "`+strconv.FormatInt(open.GetBatch().GetId(), 10)+`"`)
}
