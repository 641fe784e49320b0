package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/internal/web"
	"github.com/jobwire/jobwire/worker"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "write the screenshots of the docs: the overview's to docs/dashboard.png, the dead-letter queue's to docs/dashboard-dlq.png")

// browserTimeout bounds each step in the browser: generous, because CI runs the browser beside
// the whole race-enabled suite on two CPUs.
const browserTimeout = 60 * time.Second

// chromiumPath finds Debian's chromium. CI installs it (.ci/run); without it the browser tests
// skip, except under CI, where they fail.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed; .ci/run installs it")
	}
	t.Skip("chromium is not installed (apt-get install chromium)")
	return ""
}

// browserBundle is a broker, its dashboard on a loopback HTTP server and a headless browser.
type browserBundle struct {
	b       *brokertest.Bundle
	url     string
	ctx     context.Context
	shots   string
	mu      sync.Mutex
	errs    []string // exceptions and console errors seen in the page
	workers map[string]*brokertest.RawWorker
}

func setupBrowser(t *testing.T) *browserBundle {
	t.Helper()
	return setupBrowserWith(t, brokertest.Options{})
}

func setupBrowserWith(t *testing.T, opts brokertest.Options) *browserBundle {
	t.Helper()
	path := chromiumPath(t)
	b := brokertest.New(t, opts)
	srv := httptest.NewServer(web.Handler(web.Options{Conn: b.Server.LocalConn(), Ready: b.Broker.Ready,
		Context: t.Context(), SampleEvery: 100 * time.Millisecond}))
	t.Cleanup(srv.Close)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 860), chromedp.UserDataDir(t.TempDir()))
	t.Cleanup(cancelAlloc)
	bb := &browserBundle{b: b, url: srv.URL, shots: t.TempDir()}
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithListener(func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			bb.fail("exception: " + ev.ExceptionDetails.Text + " " + describe(ev.ExceptionDetails.Exception))
		case *runtime.EventConsoleAPICalled:
			if ev.Type == "error" {
				var parts []string
				for _, a := range ev.Args {
					parts = append(parts, describe(a))
				}
				bb.fail("console.error: " + strings.Join(parts, " "))
			}
		}
	}))
	t.Cleanup(cancel)
	bb.ctx = ctx
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	t.Cleanup(func() {
		bb.mu.Lock()
		defer bb.mu.Unlock()
		for _, e := range bb.errs {
			t.Errorf("page error: %s", e)
		}
	})
	return bb
}

func describe(o *runtime.RemoteObject) string {
	if o == nil {
		return ""
	}
	if o.Description != "" {
		return o.Description
	}
	return string(o.Value)
}

func (bb *browserBundle) fail(msg string) {
	bb.mu.Lock()
	bb.errs = append(bb.errs, msg)
	bb.mu.Unlock()
}

// do runs browser actions with a step deadline.
func (bb *browserBundle) do(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bb.ctx, browserTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// open shows a page with live refresh off, so that no redraw replaces a button between finding
// it and clicking it, and waits until its data has loaded once. Each action redraws the page.
func (bb *browserBundle) open(t *testing.T, page string) { bb.openWith(t, "/?live=0", page) }

// openLive shows a page that refreshes itself.
func (bb *browserBundle) openLive(t *testing.T, page string) { bb.openWith(t, "/", page) }

func (bb *browserBundle) openWith(t *testing.T, path, page string) {
	t.Helper()
	route := strings.SplitN(strings.SplitN(page, "?", 2)[0], "/", 2)[0]
	// Through a blank page: an address that differs only after the # (or not at all) is shown
	// without a load, and the old page's mark of being loaded would pass for the new one's.
	bb.do(t, "open "+page,
		chromedp.Navigate("about:blank"),
		chromedp.Navigate(bb.url+path+"#/"+page),
		chromedp.WaitVisible(chromedp.CSS(`body[data-loaded="`+route+`"]`)))
}

// eval runs a JavaScript expression in the page.
func eval[T any](t *testing.T, bb *browserBundle, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(bb.ctx, browserTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitJS waits until a JavaScript expression is true in the page.
func (bb *browserBundle) waitJS(t *testing.T, what, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bb.ctx, browserTimeout)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond),
		chromedp.WithPollingTimeout(browserTimeout))); err != nil {
		t.Fatalf("waiting for %s (%s): %v", what, expr, err)
	}
}

func (bb *browserBundle) screenshot(t *testing.T, name string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(bb.ctx, browserTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(bb.shots, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	return png
}

func jobState(t *testing.T, b *brokertest.Bundle, id int64) *jobwirev1.Job {
	t.Helper()
	res, err := b.Producer.GetJob(context.Background(), &jobwirev1.GetJobRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetJob()
}

// killJob runs a job through a raw worker that fails it fatally, so it lands in the DLQ.
func killJob(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, errorType string) int64 {
	t.Helper()
	a := w.Assignment()
	w.Started(a)
	w.Fail(a, brokertest.Fatal(errorType))
	return a.GetJob().GetId()
}

// jsString quotes s for JavaScript.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// The dashboard in a real browser: every page loads without a script error, a hostile
// payload is shown as text, and the buttons requeue, purge, pause and reset through the
// broker.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	bb := setupBrowser(t)
	b := bb.b
	ctx := context.Background()

	// A job whose payload and type carry markup, and two dead jobs.
	hostile := `{"note":"<script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\">"}`
	hostileID := b.Enqueue(&jobwirev1.JobSpec{Type: "email.send", Queue: "mail", Payload: []byte(hostile),
		Schedule: &jobwirev1.JobSpec_Delay{Delay: durationpbHour()}})
	killer := b.Connect(brokertest.Hello("killer-1", 1, "report.build"))
	b.Enqueue(&jobwirev1.JobSpec{Type: "report.build", Queue: "reports", Payload: []byte(`{"month":"2026-02"}`)})
	deadA := killJob(t, b, killer, "KeyError")
	b.Enqueue(&jobwirev1.JobSpec{Type: "report.build", Queue: "reports", Payload: []byte(`{"month":"bad"}`)})
	deadB := killJob(t, b, killer, "ValueError")
	b.Enqueue(&jobwirev1.JobSpec{Type: "report.build", Queue: "reports"})
	deadC := killJob(t, b, killer, "IOError")
	if _, err := b.Admin.ForceBreaker(ctx, &jobwirev1.ForceBreakerRequest{Type: "report.build", State: jobwirev1.BreakerState_BREAKER_STATE_OPEN}); err != nil {
		t.Fatal(err)
	}

	t.Run("the graph draws on the first open", func(t *testing.T) {
		// The sampler has read since the listener started: the first page ever opened, with
		// live refresh off, draws the lines against a labelled time axis from its one load.
		bb.open(t, "overview")
		bb.waitJS(t, "three lines and a time axis", `document.querySelectorAll("svg.graph polyline").length === 3 &&
			[...document.querySelectorAll("svg.graph .time-axis text")].filter(t => /^\d\d:\d\d:\d\d$/.test(t.textContent)).length >= 1`)
	})

	t.Run("every page loads", func(t *testing.T) {
		for _, page := range []string{"overview", "queues", "jobs", fmt.Sprintf("job/%d", hostileID), "dlq", "breakers", "workers"} {
			bb.open(t, page)
			bb.screenshot(t, strings.ReplaceAll(page, "/", "-"))
		}
		bb.open(t, "overview")
		bb.waitJS(t, "the broker listed as leader", `document.querySelector('tr[data-leader="1"]') !== null`)
		bb.open(t, "workers")
		bb.waitJS(t, "the worker row", `document.querySelector('tr[data-worker="killer-1"]') !== null`)
		bb.open(t, "breakers")
		bb.waitJS(t, "the open breaker highlighted", `document.querySelector('tr[data-type="report.build"]').classList.contains("alert")`)
	})

	t.Run("a hostile payload is shown as text", func(t *testing.T) {
		bb.open(t, fmt.Sprintf("job/%d", hostileID))
		shown := eval[string](t, bb, `document.getElementById("payload").textContent`)
		if !strings.Contains(shown, "<script>window.__pwned=1</script>") || !strings.Contains(shown, "onerror") {
			t.Errorf("payload shown as %q, want the markup as text", shown)
		}
		if n := eval[int](t, bb, `document.querySelectorAll("main script, main img").length`); n != 0 {
			t.Errorf("the payload made %d elements", n)
		}
		if pwned := eval[bool](t, bb, `window.__pwned !== undefined`); pwned {
			t.Error("the payload's script ran")
		}
	})

	t.Run("requeue a dead job and see it leave the list", func(t *testing.T) {
		bb.open(t, "dlq")
		row := fmt.Sprintf(`tr[data-job="%d"]`, deadA)
		bb.waitJS(t, "the dead job listed", `document.querySelector('`+row+`') !== null`)
		bb.do(t, "click requeue", chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll('`+row+` button')].find(b => b.textContent === "Requeue")`)))
		bb.waitJS(t, "the job to leave the list", `document.querySelector('`+row+`') === null`)
		if st := jobState(t, b, deadA).GetState(); st != jobwirev1.JobState_JOB_STATE_PENDING {
			t.Errorf("requeued job is %s, want PENDING", st)
		}
	})

	t.Run("requeue one job with an edited payload", func(t *testing.T) {
		bb.open(t, "dlq")
		row := fmt.Sprintf(`tr[data-job="%d"]`, deadB)
		bb.waitJS(t, "the dead job listed", `document.querySelector('`+row+`') !== null`)
		bb.do(t, "open the editor", chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll('`+row+` button')].find(b => b.textContent === "Edit & requeue")`)),
			chromedp.WaitVisible(chromedp.ID("edit-payload")))
		if v := eval[string](t, bb, `document.getElementById("edit-payload").value`); !strings.Contains(v, `"month": "bad"`) {
			t.Errorf("editor shows %q, want the pretty-printed payload", v)
		}
		bb.do(t, "edit and requeue", chromedp.SetValue(chromedp.ID("edit-payload"), `{"month":"2026-03"}`),
			chromedp.Click(chromedp.ID("requeue-edited")))
		bb.waitJS(t, "the job to leave the list", `document.querySelector('`+row+`') === null`)
		j := jobState(t, b, deadB)
		if j.GetState() != jobwirev1.JobState_JOB_STATE_PENDING || string(j.GetPayload()) != `{"month":"2026-03"}` {
			t.Errorf("requeued job is %s with payload %s, want PENDING with the edited payload", j.GetState(), j.GetPayload())
		}
	})

	t.Run("preview then purge", func(t *testing.T) {
		bb.open(t, "dlq")
		bb.do(t, "filter and preview", chromedp.SetValue(chromedp.CSS(`input[placeholder="error type"]`), "IOError"),
			chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll("button")].find(b => b.textContent === "Preview purge")`)),
			chromedp.WaitVisible(chromedp.ID("confirm")))
		if label := eval[string](t, bb, `document.getElementById("confirm").textContent`); label != "Purge 1" {
			t.Errorf("confirm button says %q, want the count: Purge 1", label)
		}
		// A job that dies with the same error after the preview was not seen: the confirm
		// leaves it alone.
		syncer := b.Connect(brokertest.Hello("syncer-1", 1, "sync.run"))
		b.Enqueue(&jobwirev1.JobSpec{Type: "sync.run", Queue: "sync"})
		unseen := killJob(t, b, syncer, "IOError")
		bb.do(t, "confirm", chromedp.Click(chromedp.ID("confirm")))
		bb.waitJS(t, "the purge to be reported", `document.getElementById("bulk").textContent.includes("Purged 1 job.")`)
		if _, err := b.Producer.GetJob(ctx, &jobwirev1.GetJobRequest{Id: deadC}); err == nil {
			t.Errorf("job %d still exists after the purge", deadC)
		}
		if st := jobState(t, b, unseen).GetState(); st != jobwirev1.JobState_JOB_STATE_DEAD {
			t.Errorf("job %d, dead after the preview, is %s: the confirm acted on a job the operator never saw", unseen, st)
		}
	})

	t.Run("pause a queue and see dispatch stop", func(t *testing.T) {
		b.Enqueue(&jobwirev1.JobSpec{Type: "email.send", Queue: "mail"}) // creates the queue
		w := b.Connect(brokertest.Hello("mailer-1", 4, "email.send"))
		a := w.Assignment()
		w.Succeed(a)
		bb.open(t, "queues")
		row := `tr[data-queue="mail"]`
		bb.do(t, "pause", chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll('`+row+` button')].find(b => b.textContent === "Pause")`)))
		bb.waitJS(t, "the queue shown paused", `document.querySelector('`+row+`').textContent.includes("paused")`)
		held := b.Enqueue(&jobwirev1.JobSpec{Type: "email.send", Queue: "mail"})
		// A job of another queue enqueued after it is dispatched: the round that took it passed
		// the paused queue's job over.
		other := b.Enqueue(&jobwirev1.JobSpec{Type: "email.send", Queue: "other"})
		if got := w.Assignment().GetJob().GetId(); got != other {
			t.Fatalf("assigned job %d, want %d of the running queue", got, other)
		}
		if st := jobState(t, b, held).GetState(); st != jobwirev1.JobState_JOB_STATE_PENDING {
			t.Fatalf("job of the paused queue is %s, want PENDING", st)
		}
		// The enqueue came from elsewhere: live refresh shows it.
		bb.do(t, "turn live refresh on", chromedp.Click(chromedp.ID("live")))
		bb.waitJS(t, "one ready job shown", `document.querySelector('`+row+`').children[1].textContent === "1"`)
		bb.do(t, "turn live refresh off", chromedp.Click(chromedp.ID("live")))
		bb.do(t, "resume", chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll('`+row+` button')].find(b => b.textContent === "Resume")`)))
		if got := w.Assignment().GetJob().GetId(); got != held {
			t.Fatalf("after resume assigned job %d, want %d", got, held)
		}
	})

	t.Run("reset a breaker", func(t *testing.T) {
		bb.open(t, "breakers")
		row := `tr[data-type="report.build"]`
		bb.do(t, "reset", chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll('`+row+` button')].find(b => b.textContent === "Reset")`)))
		bb.waitJS(t, "the breaker shown closed", `document.querySelector('`+row+` .badge').textContent === "CLOSED"`)
		res, err := b.Admin.ListBreakers(ctx, &jobwirev1.ListBreakersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, br := range res.GetBreakers() {
			if br.GetType() == "report.build" && br.GetState() != jobwirev1.BreakerState_BREAKER_STATE_CLOSED {
				t.Errorf("breaker is %s after reset", br.GetState())
			}
		}
	})

	t.Run("a job's page says why it is not running", func(t *testing.T) {
		bb.open(t, fmt.Sprintf("job/%d", hostileID))
		bb.waitJS(t, "the scheduled reason", `document.getElementById("waiting") !== null && document.getElementById("waiting").dataset.reason === "SCHEDULED"`)
		runAt := jobState(t, b, hostileID).GetRunAt().AsTime().UTC().Format(time.RFC3339)
		if got := eval[string](t, bb, `document.getElementById("waiting").textContent`); !strings.Contains(got, "scheduled for "+runAt) {
			t.Errorf("the page says %q, want it scheduled for %s", got, runAt)
		}
		if _, err := b.Admin.PauseQueue(ctx, &jobwirev1.PauseQueueRequest{Queue: "paused-here"}); err != nil {
			t.Fatal(err)
		}
		held := b.Enqueue(&jobwirev1.JobSpec{Type: "email.send", Queue: "paused-here"})
		bb.open(t, fmt.Sprintf("job/%d", held))
		if got := eval[string](t, bb, `document.getElementById("waiting").textContent`); !strings.Contains(got, `queue "paused-here" is paused`) {
			t.Errorf("the page says %q, want the paused queue", got)
		}
	})

	t.Run("cancel a job from its page", func(t *testing.T) {
		bb.open(t, fmt.Sprintf("job/%d", hostileID))
		bb.do(t, "cancel", chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll("button")].find(b => b.textContent === "Cancel job")`)))
		bb.waitJS(t, "the job shown cancelled", `document.querySelector("main .badge").textContent === "CANCELLED"`)
	})

	t.Run("overview refreshes live", func(t *testing.T) {
		if *updateScreenshot {
			demoWorkload(t, b)
		}
		bb.openLive(t, "overview")
		before := eval[string](t, bb, `document.querySelector('[data-state="PENDING"] .n').textContent`)
		b.Enqueue(&jobwirev1.JobSpec{Type: "later", Queue: "later"})
		b.Enqueue(&jobwirev1.JobSpec{Type: "later", Queue: "later"})
		bb.waitJS(t, "the pending count to change without a reload",
			`document.querySelector('[data-state="PENDING"] .n').textContent !== `+jsString(before)+` && document.body.dataset.loaded === "overview"`)
		bb.waitJS(t, "the graph to draw", `document.querySelectorAll("svg.graph polyline").length === 3`)
		png := bb.screenshot(t, "overview-live")
		if *updateScreenshot {
			if err := os.WriteFile(filepath.Join("..", "..", "docs", "dashboard.png"), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Logf("screenshots in %s", bb.shots)
}

func durationpbHour() *durationpb.Duration { return durationpb.New(time.Hour) }

// demoWorkload runs a few seconds of jobs, some of them failing, so that the screenshot in the
// README shows a graph with something on it.
func demoWorkload(t *testing.T, b *brokertest.Bundle) {
	t.Helper()
	w, err := worker.New(b.Conn, worker.Options{ID: "mailer-1", Concurrency: 16})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("email.send", func(ctx context.Context, j *worker.Job) error { return nil })
	// invoice.render fails every time: its breaker opens, and the overview shows it.
	w.Handle("invoice.render", func(ctx context.Context, j *worker.Job) error {
		return errors.New("template service timed out")
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	end := time.Now().Add(4 * time.Second)
	for i := 0; time.Now().Before(end); i++ {
		specs := make([]*jobwirev1.JobSpec, 10+i%15)
		for k := range specs {
			specs[k] = &jobwirev1.JobSpec{Type: "email.send", Queue: "mail", Payload: []byte(`{"to":"ada@example.com"}`)}
		}
		if i%8 == 0 {
			specs[0] = &jobwirev1.JobSpec{Type: "invoice.render", Queue: "billing", Payload: []byte(`{"invoice":42}`)}
		}
		if _, err := b.Producer.EnqueueBatch(context.Background(), &jobwirev1.EnqueueBatchRequest{Jobs: specs}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // a steady producer for the picture, not a wait for a condition
	}
}

// The lists as an operator uses them: the address holds the filters, sort and page, so a pasted
// link opens the same view; dead jobs show when and why they died; a scheduled job shows when it
// runs; an empty queue has no oldest ready job.
func TestDashboardListsInBrowser(t *testing.T) {
	t.Parallel()
	// Many jobs die here: the breaker would hold the rest back.
	bb := setupBrowserWith(t, brokertest.Options{Breakers: &broker.BreakerOptions{Default: breaker.DefaultConfig(), PerType: map[string]breaker.Config{"bulk.x": {Disabled: true}}}})
	b := bb.b
	later := b.Enqueue(&jobwirev1.JobSpec{Type: "digest.send", Queue: "later", Schedule: &jobwirev1.JobSpec_Delay{Delay: durationpbHour()}})
	killer := b.Connect(brokertest.Hello("killer-1", 1, "report.build", "bulk.x"))
	var dead []int64
	for range 52 {
		b.Enqueue(&jobwirev1.JobSpec{Type: "bulk.x", Queue: "bulk"})
		dead = append(dead, killJob(t, b, killer, "TimeoutError"))
	}
	b.Enqueue(&jobwirev1.JobSpec{Type: "report.build", Queue: "reports"})
	first := killJob(t, b, killer, "KeyError")
	b.Enqueue(&jobwirev1.JobSpec{Type: "report.build", Queue: "reports"})
	second := killJob(t, b, killer, "ValueError")

	t.Run("a scheduled job shows when it runs", func(t *testing.T) {
		bb.open(t, "jobs?state=SCHEDULED")
		if v := eval[string](t, bb, `document.querySelector('select[aria-label="state"]').value`); v != "SCHEDULED" {
			t.Errorf("state filter shows %q, want the address's SCHEDULED", v)
		}
		runAt := jobState(t, b, later).GetRunAt().AsTime().UTC().Format("2006-01-02 15:04:05Z")
		row := fmt.Sprintf(`tr[data-job="%d"]`, later)
		bb.waitJS(t, "the scheduled job's run time", `document.querySelector('`+row+`') !== null && document.querySelector('`+row+`').textContent.includes(`+jsString(runAt)+`)`)
		if n := eval[int](t, bb, `document.querySelectorAll("#jobs-list tbody tr[data-job]").length`); n != 1 {
			t.Errorf("%d jobs listed, want only the scheduled one", n)
		}
	})

	t.Run("an empty queue has no oldest ready job", func(t *testing.T) {
		bb.open(t, "queues")
		if v := eval[string](t, bb, `document.querySelector('tr[data-queue="later"]').children[4].textContent`); v != "-" {
			t.Errorf("oldest ready of a queue with nothing ready shows %q, want -", v)
		}
	})

	t.Run("dead jobs show when and why they died, sorted as the address says", func(t *testing.T) {
		bb.open(t, "dlq?type=report.build")
		if v := eval[string](t, bb, `document.querySelector('input[aria-label="type"]').value`); v != "report.build" {
			t.Errorf("type filter shows %q, want the address's report.build", v)
		}
		ids := eval[[]string](t, bb, `[...document.querySelectorAll("#dlq-list tbody tr[data-job]")].map(r => r.dataset.job)`)
		if want := []string{fmt.Sprint(second), fmt.Sprint(first)}; strings.Join(ids, ",") != strings.Join(want, ",") {
			t.Errorf("listed %v, want the newest death first: %v", ids, want)
		}
		headers := eval[[]string](t, bb, `[...document.querySelectorAll("#dlq-list thead th[data-sort]")].map(h => h.dataset.sort)`)
		if !slicesContain(headers, "died_at") || !slicesContain(headers, "reason") || slicesContain(headers, "created_at") {
			t.Errorf("columns %v, want died_at and reason, not created_at", headers)
		}
		died := jobState(t, b, second).GetFinishedAt().AsTime().UTC().Format("2006-01-02 15:04:05Z")
		row := fmt.Sprintf(`#dlq-list tr[data-job="%d"]`, second)
		text := eval[string](t, bb, `document.querySelector('`+row+`').textContent`)
		if !strings.Contains(text, died) || !strings.Contains(text, "FATAL") || !strings.Contains(text, "ValueError") {
			t.Errorf("row reads %q, want died at %s, reason FATAL and the error ValueError", text, died)
		}
		bb.do(t, "sort by id", chromedp.Click(chromedp.CSS(`#dlq-list th[data-sort="id"] a`)))
		bb.waitJS(t, "the address to carry the sort", `location.hash.includes("sort=id") && location.hash.includes("order=asc") && location.hash.includes("type=report.build") &&
			document.body.dataset.loaded === "dlq" && document.querySelector('#dlq-list th[data-sort="id"]').dataset.order === "asc"`)
		ids = eval[[]string](t, bb, `[...document.querySelectorAll("#dlq-list tbody tr[data-job]")].map(r => r.dataset.job)`)
		if want := []string{fmt.Sprint(first), fmt.Sprint(second)}; strings.Join(ids, ",") != strings.Join(want, ",") {
			t.Errorf("sorted by id listed %v, want %v", ids, want)
		}
	})

	t.Run("a sort orders the whole list, not the page shown", func(t *testing.T) {
		rows := `[...document.querySelectorAll("#dlq-list tbody tr[data-job]")].map(r => r.dataset.job)`
		bb.open(t, "dlq?sort=id&order=asc")
		ids := eval[[]string](t, bb, rows)
		if len(ids) != 50 || ids[0] != fmt.Sprint(dead[0]) || ids[49] != fmt.Sprint(dead[49]) {
			t.Fatalf("first page sorted by id up lists %d jobs from %v to %v, want 50 from the first dead job %d to %d",
				len(ids), firstOf(ids), lastOf(ids), dead[0], dead[49])
		}
		if v := eval[string](t, bb, `document.querySelector('#dlq-list th[data-sort="id"]').dataset.order`); v != "asc" {
			t.Errorf("the id header shows order %q, want asc", v)
		}
		bb.do(t, "next page", chromedp.Click(chromedp.ID("next-page")))
		bb.waitJS(t, "the second page", `location.hash.includes("page=") && document.body.dataset.loaded === "dlq" && document.querySelectorAll("#dlq-list tbody tr[data-job]").length === 4`)
		ids = eval[[]string](t, bb, rows)
		if want := fmt.Sprint(dead[50], ",", dead[51], ",", first, ",", second); strings.Join(ids, ",") != want {
			t.Errorf("second page sorted by id up lists %v, want %s", ids, want)
		}
		// A header click sorts the other way from the first page: the token belongs to its sort.
		bb.do(t, "sort by id down", chromedp.Click(chromedp.CSS(`#dlq-list th[data-sort="id"] a`)))
		bb.waitJS(t, "the list sorted down", `location.hash.includes("order=desc") && !location.hash.includes("page=") && document.body.dataset.loaded === "dlq" &&
			document.querySelector('#dlq-list th[data-sort="id"]').dataset.order === "desc"`)
		if ids = eval[[]string](t, bb, rows); firstOf(ids) != fmt.Sprint(second) {
			t.Errorf("sorted by id down the list starts at %v, want the newest id %d", firstOf(ids), second)
		}

		bb.open(t, "jobs?sort=created_at&order=asc")
		if got := eval[string](t, bb, `document.querySelector("#jobs-list tbody tr[data-job]").dataset.job`); got != fmt.Sprint(later) {
			t.Errorf("jobs sorted by creation up start with job %s, want the first created, %d", got, later)
		}
		bb.open(t, "jobs")
		if v := eval[string](t, bb, `document.querySelector('#jobs-list th[data-sort="created_at"]').dataset.order`); v != "desc" {
			t.Errorf("the jobs list opens sorted %q by created_at, want desc (newest first)", v)
		}
	})

	t.Run("the dead-letter page as the docs show it", func(t *testing.T) {
		if !*updateScreenshot {
			t.Skip("checks nothing the subtests above do not: it writes docs/dashboard-dlq.png with -update-screenshot")
		}
		bb.open(t, "dlq")
		bb.waitJS(t, "the list and the top errors", `document.querySelectorAll("#dlq-list tbody tr[data-job]").length === 50`)
		ctx, cancel := context.WithTimeout(bb.ctx, browserTimeout)
		defer cancel()
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot()) // the window, as an operator sees it first
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "dashboard-dlq.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a page is an address", func(t *testing.T) {
		bb.open(t, "dlq?type=bulk.x")
		bb.do(t, "next page", chromedp.Click(chromedp.ID("next-page")))
		bb.waitJS(t, "the second page", `location.hash.includes("page=") && document.body.dataset.loaded === "dlq" && document.querySelectorAll("#dlq-list tbody tr[data-job]").length === 2`)
		hash := eval[string](t, bb, `location.hash`)
		want := fmt.Sprint(dead[1], ",", dead[0])
		ids := eval[[]string](t, bb, `[...document.querySelectorAll("#dlq-list tbody tr[data-job]")].map(r => r.dataset.job)`)
		if strings.Join(ids, ",") != want {
			t.Errorf("second page lists %v, want the two oldest deaths %s", ids, want)
		}
		// The link pasted into a fresh page opens the same page.
		bb.open(t, strings.TrimPrefix(hash, "#/"))
		ids = eval[[]string](t, bb, `[...document.querySelectorAll("#dlq-list tbody tr[data-job]")].map(r => r.dataset.job)`)
		if strings.Join(ids, ",") != want {
			t.Errorf("the pasted address lists %v, want %s", ids, want)
		}
	})

	t.Run("requeued jobs leave the list without a reload", func(t *testing.T) {
		// Live refresh off: the action's own redraw must take the rows away.
		bb.open(t, "dlq?type=bulk.x")
		picked := []int64{dead[51], dead[50]}
		for _, id := range picked {
			bb.do(t, fmt.Sprint("tick job ", id), chromedp.Click(chromedp.CSS(fmt.Sprintf(`#dlq-list tr[data-job="%d"] input.pick`, id))))
		}
		bb.waitJS(t, "the selection offered", `document.getElementById("requeue-selected") !== null && document.getElementById("requeue-selected").textContent === "Requeue 2 jobs"`)
		bb.do(t, "requeue the selected", chromedp.Click(chromedp.ID("requeue-selected")))
		gone := func(ids []int64) string {
			var conds []string
			for _, id := range ids {
				conds = append(conds, fmt.Sprintf(`document.querySelector('#dlq-list tr[data-job="%d"]') === null`, id))
			}
			return strings.Join(conds, " && ")
		}
		bb.waitJS(t, "the requeue reported and the rows gone", `document.getElementById("bulk").textContent.includes("Requeued 2 jobs.") && `+gone(picked)+
			` && document.getElementById("requeue-selected") === null`)
		for _, id := range picked {
			if st := jobState(t, b, id).GetState(); st == jobwirev1.JobState_JOB_STATE_DEAD {
				t.Errorf("job %d is still DEAD after the requeue", id)
			}
		}
		// Then live refresh on, as an operator leaves it: the next redraws do not bring them back.
		bb.do(t, "turn live refresh on", chromedp.Click(chromedp.ID("live")))
		for range 2 {
			eval[bool](t, bb, `(window.__drawn = document.querySelector("#dlq-list table")) !== null`)
			bb.waitJS(t, "a live redraw", `document.querySelector("#dlq-list table") !== window.__drawn`)
			if ok := eval[bool](t, bb, gone(picked)); !ok {
				t.Fatal("a live redraw lists the requeued jobs again")
			}
		}
	})

	t.Run("a ticked purge deletes exactly the jobs ticked", func(t *testing.T) {
		bb.open(t, "dlq?type=bulk.x")
		picked, kept := dead[49], dead[48]
		bb.do(t, fmt.Sprint("tick job ", picked), chromedp.Click(chromedp.CSS(fmt.Sprintf(`#dlq-list tr[data-job="%d"] input.pick`, picked))))
		bb.waitJS(t, "the selection offered", `document.getElementById("purge-selected") !== null && document.getElementById("purge-selected").textContent === "Purge 1 job"`)
		bb.do(t, "purge the selected", chromedp.Click(chromedp.ID("purge-selected")))
		bb.waitJS(t, "the purge reported and the row gone", `document.getElementById("bulk").textContent.includes("Purged 1 job.") && `+
			fmt.Sprintf(`document.querySelector('#dlq-list tr[data-job="%d"]') === null`, picked))
		if _, err := b.Producer.GetJob(context.Background(), &jobwirev1.GetJobRequest{Id: picked}); status.Code(err) != codes.NotFound {
			t.Errorf("GetJob of the purged job %d: %v, want NotFound", picked, err)
		}
		if st := jobState(t, b, kept).GetState(); st != jobwirev1.JobState_JOB_STATE_DEAD {
			t.Errorf("job %d, not ticked, is %s after the purge, want DEAD", kept, st)
		}
	})

	t.Run("a bulk requeue leaves the list at once", func(t *testing.T) {
		bb.open(t, "dlq?type=report.build")
		bb.do(t, "preview", chromedp.SetValue(chromedp.CSS(`input[aria-label="type"]`), "report.build"),
			chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll("button")].find(b => b.textContent === "Preview requeue")`)),
			chromedp.WaitVisible(chromedp.ID("confirm")))
		bb.do(t, "confirm", chromedp.Click(chromedp.ID("confirm")))
		bb.waitJS(t, "the requeue reported and the list emptied", `document.getElementById("bulk").textContent.includes("Requeued 2 job") &&
			document.querySelectorAll("#dlq-list tbody tr[data-job]").length === 0`)
		for _, id := range []int64{first, second} {
			if st := jobState(t, b, id).GetState(); st == jobwirev1.JobState_JOB_STATE_DEAD {
				t.Errorf("job %d is still DEAD after the requeue", id)
			}
		}
	})
}

func firstOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func lastOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
