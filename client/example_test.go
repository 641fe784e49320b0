package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/job"
)

// These examples need a running broker, so they are compiled but not run; an end-to-end test
// runs the same calls against a real one.

func ExampleDial() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.DefaultAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}

// Several brokers on one PostgreSQL database: calls go to whichever is up, and a worker made
// on the same connection moves to another broker when its own goes away.
func ExampleDialBrokers() {
	ctx := context.Background()
	c, err := client.DialBrokers(ctx, []string{"10.0.0.1:7070", "10.0.0.2:7070"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	// worker.New(c.Conn(), worker.Options{ID: "mailer-1"}) runs a worker over it.
}

func ExampleClient_Enqueue() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.DefaultAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	res, err := c.Enqueue(ctx, "email.send", []byte(`{"to":"ada@example.com"}`),
		client.Queue("mail"),
		client.Priority(5),
		client.Delay(time.Minute),
		client.MaxAttempts(3),
		// Safe to retry after an ambiguous failure: the broker returns the first job.
		client.IdempotencyKey("welcome-ada"),
	)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.ID, res.State, res.Duplicate)
}

func ExampleClient_EnqueueBatch() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.DefaultAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Stored in one transaction: either every job exists afterwards or none does.
	results, err := c.EnqueueBatch(ctx, []client.JobSpec{
		client.NewJobSpec("invoice.render", []byte(`{"invoice":1}`), client.Queue("billing")),
		client.NewJobSpec("invoice.render", []byte(`{"invoice":2}`), client.Queue("billing")),
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range results {
		fmt.Println(r.ID)
	}
}

func ExampleClient_Get() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.DefaultAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	j, err := c.Get(ctx, 42)
	if errors.Is(err, client.ErrNotFound) {
		fmt.Println("no job 42")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	if j.State == job.StateDead {
		fmt.Printf("dead (%s): %s: %s\n", j.DeadReason, j.LastErrorType, j.LastErrorMessage)
		for _, a := range j.History {
			fmt.Printf("attempt %d on %s: %s %s\n", a.Number, a.WorkerID, a.Outcome, a.Message)
		}
	}
}

func ExampleClient_RequeueDeadJobs() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.DefaultAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Look first: a preview counts and samples the matching jobs and changes nothing.
	sel := client.Selection{Filter: &client.DeadJobFilter{Type: "email.send", ErrorType: "SMTPError"}, Preview: true}
	preview, err := c.RequeueDeadJobs(ctx, &client.RequeueParams{Selection: sel})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("would requeue", preview.Matched)

	sel.Preview = false
	done, err := c.RequeueDeadJobs(ctx, &client.RequeueParams{Selection: sel})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("requeued", done.Affected)
}

func ExampleClient_AllDeadJobs() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.DefaultAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	for j, err := range c.AllDeadJobs(ctx, &client.ListDeadJobsParams{Filter: client.DeadJobFilter{Queue: "mail"}}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(j.ID, j.LastErrorType)
	}
}

func ExampleError() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.DefaultAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	_, err = c.Cancel(ctx, 42)
	var cerr *client.Error
	switch {
	case errors.Is(err, client.ErrFailedPrecondition):
		fmt.Println("job 42 already finished")
	case errors.As(err, &cerr):
		fmt.Printf("%s failed (%s): %s\n", cerr.Op, cerr.Code, cerr.Message)
	}
}

// A broker on the network serves TLS and checks tokens: trust its CA, present a client
// certificate when it requires one (mutual TLS), and send the token on every call.
func ExampleWithTLSFiles() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "jobwire.internal:7070",
		client.WithTLSFiles("ca.pem", "client.pem", "client-key.pem"),
		client.WithToken(os.Getenv("JOBWIRE_TOKEN")))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}
