package web_test

import (
	"testing"

	"github.com/chromedp/chromedp"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// The rate limits page sets a limit from its form, shows its allowance fall as jobs start, and
// removes it.
func TestRateLimitsPageInBrowser(t *testing.T) {
	t.Parallel()
	bb := setupBrowser(t)
	b := bb.b
	bb.open(t, "ratelimits")
	bb.waitJS(t, "the empty list", `document.querySelector("main").textContent.includes("No rate limit is set.")`)
	bb.do(t, "set a limit",
		chromedp.SetValue(chromedp.CSS(`input[aria-label="limit name"]`), "mail"),
		chromedp.SetValue(chromedp.CSS(`input[aria-label="rate"]`), "2"),
		chromedp.SetValue(chromedp.CSS(`input[aria-label="interval"]`), "60s"),
		chromedp.SetValue(chromedp.CSS(`input[aria-label="type"]`), "mail"),
		chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll("main button")].find(b => b.textContent === "Set")`)))
	row := `document.querySelector('tr[data-limit="mail"]')`
	bb.waitJS(t, "the limit with its full allowance", row+` !== null && `+row+`.querySelector(".allowance").textContent === "2"`)

	b.Enqueue(&jobwirev1.JobSpec{Type: "mail"})
	b.Enqueue(&jobwirev1.JobSpec{Type: "mail"})
	w := b.Connect(brokertest.Hello("mail-1", 4, "mail"))
	w.Assignment()
	w.Assignment()
	bb.open(t, "ratelimits")
	bb.waitJS(t, "no allowance left, shown as an alert", row+`.querySelector(".allowance").textContent === "0" && `+row+`.classList.contains("alert")`)
	bb.screenshot(t, "ratelimits")

	bb.do(t, "remove", chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll('tr[data-limit="mail"] button')].find(b => b.textContent === "Remove")`)))
	bb.waitJS(t, "the limit gone", row+` === null`)
}
