package web_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/chromedp/chromedp"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// A job's page shows its parents with their states and links, its dependents and its graph,
// and an admin cancels the graph from it: the page then shows the job cancelled.
func TestJobPageShowsDependenciesInBrowser(t *testing.T) {
	t.Parallel()
	bb := setupBrowser(t)
	b := bb.b
	g, err := b.Producer.EnqueueGraph(context.Background(), &jobwirev1.EnqueueGraphRequest{Nodes: []*jobwirev1.GraphNode{
		{Key: "fetch", Job: &jobwirev1.JobSpec{Type: "fetch"}},
		{Key: "report", Job: &jobwirev1.JobSpec{Type: "report"}, DependsOn: []string{"fetch"}},
		{Key: "mail", Job: &jobwirev1.JobSpec{Type: "mail"}, DependsOn: []string{"report"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	fetch, report, mail := g.GetJobs()[0].GetId(), g.GetJobs()[1].GetId(), g.GetJobs()[2].GetId()
	id := strconv.FormatInt(report, 10)

	bb.open(t, "job/"+id)
	deps := `document.querySelector('#dependencies')`
	bb.waitJS(t, "the parent with its state, linked", `document.querySelector('#parents a[data-job="`+strconv.FormatInt(fetch, 10)+`"]') !== null && `+
		`document.querySelector('#parents').textContent.includes("PENDING")`)
	bb.waitJS(t, "the dependent and the graph", `document.querySelector('#dependents a[data-job="`+strconv.FormatInt(mail, 10)+`"]') !== null && `+
		deps+`.textContent.includes("Graph`+strconv.FormatInt(g.GetGraphId(), 10)+`")`)
	bb.waitJS(t, "why it waits", `document.querySelector('#waiting').dataset.reason === "PARENTS"`)
	bb.screenshot(t, "job-dependencies")

	bb.do(t, "cancel the graph", chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll('#dependencies button')].find(b => b.textContent === "Cancel graph")`)))
	bb.waitJS(t, "the job shown cancelled", `document.querySelector('.badge').textContent === "CANCELLED"`)
	for _, id := range []int64{fetch, report, mail} {
		j, err := b.Producer.GetJob(context.Background(), &jobwirev1.GetJobRequest{Id: id})
		if err != nil || j.GetJob().GetState() != jobwirev1.JobState_JOB_STATE_CANCELLED {
			t.Fatalf("job %d after cancelling the graph: %v, %v", id, j.GetJob().GetState(), err)
		}
	}
}
