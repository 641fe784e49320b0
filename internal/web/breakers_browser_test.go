package web_test

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/jobwire/jobwire/breaker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// The breakers page says why a breaker opened (its window's numbers and last failures, the
// worker's messages shown as text), and a reset shows as taking effect.
func TestBreakersPageShowsWhyInBrowser(t *testing.T) {
	t.Parallel()
	bb := setupBrowser(t)
	b := bb.b
	w := b.Connect(brokertest.Hello("pay-1", 1, "pay"))
	for range breaker.DefaultMinCalls {
		b.Enqueue(&jobwirev1.JobSpec{Type: "pay", MaxAttempts: 1})
		a := w.Assignment()
		w.Started(a)
		f := brokertest.Transient("GatewayDown", 0)
		f.Message = `<img src=x onerror="window.__pwned=1">`
		w.Fail(a, f)
	}

	bb.open(t, "breakers")
	trip := `document.querySelector('[data-trip="pay"]')`
	bb.waitJS(t, "why it opened", trip+` !== null && `+trip+`.textContent.includes("20 of 20 calls failed (100%) within 30s (mode ratio)")`)
	bb.waitJS(t, "its last five failures, as text", trip+`.querySelectorAll("tr").length === 6 && `+
		trip+`.textContent.includes('GatewayDown: <img src=x onerror="window.__pwned=1">') && window.__pwned === undefined`)
	bb.screenshot(t, "breakers-open")

	row := `tr[data-type="pay"]`
	bb.do(t, "reset", chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll('`+row+` button')].find(b => b.textContent === "Reset")`)))
	bb.waitJS(t, "the breaker shown closed, reset", `document.querySelector('`+row+` .badge').textContent === "CLOSED" && `+
		`document.querySelector('`+row+` .changed').textContent.startsWith("reset at ") && `+trip+` === null`)
}
