package web_test

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// The queues page lists the concurrency rules with how busy their keys are; an admin adds one
// with the form and removes it with its button.
func TestConcurrencyRulesInBrowser(t *testing.T) {
	t.Parallel()
	bb := setupBrowser(t)
	b := bb.b
	for range 3 {
		b.Enqueue(&jobwirev1.JobSpec{Type: "sync", Payload: []byte(`{"customer_id":"acme"}`), ConcurrencyKey: "acme", ConcurrencyLimit: 1})
	}
	bb.open(t, "queues")
	producers := `document.querySelector('#concurrency tr[data-rule="(producers\' keys)"]')`
	bb.waitJS(t, "the producers' keys with their waiting jobs", producers+` !== null && `+producers+`.textContent.includes("per job")`)

	form := `#concurrency form`
	bb.do(t, "fill and send the form",
		chromedp.SetValue(chromedp.CSS(form+` input[aria-label="rule name"]`), "per-customer"),
		chromedp.SetValue(chromedp.CSS(form+` input[aria-label="rule type"]`), "sync"),
		chromedp.SetValue(chromedp.CSS(form+` input[aria-label="rule key"]`), "payload.customer_id"),
		chromedp.Click(chromedp.CSS(form+` button`)))
	row := `document.querySelector('#concurrency tr[data-rule="per-customer"]')`
	bb.waitJS(t, "the new rule listed", row+` !== null && `+row+`.textContent.includes("payload.customer_id")`)
	res, err := b.Admin.ListConcurrencyRules(context.Background(), &jobwirev1.ListConcurrencyRulesRequest{})
	if err != nil || len(res.GetRules()) != 2 || res.GetRules()[0].GetRule().GetMaxRunning() != 1 {
		t.Fatalf("rules after the form: %v (%v), want per-customer with max running 1 and the producers' keys", res.GetRules(), err)
	}
	bb.screenshot(t, "concurrency")
	bb.do(t, "remove the rule", chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll('#concurrency tr[data-rule="per-customer"] button')].find(b => b.textContent === "Remove")`)))
	bb.waitJS(t, "the rule gone", row+` === null`)
}
