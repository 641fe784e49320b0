package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/jobwire/jobwire/client"
)

// A producer waits for a job's result: Wait returns once the job is final, without polling.
func ExampleClient_Wait() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "localhost:7070")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	res, err := c.EnqueueJSON(ctx, "report.build", map[string]int{"parts": 5})
	if err != nil {
		log.Fatal(err)
	}
	j, err := c.Wait(ctx, res.ID)
	if errors.Is(err, client.ErrJobFailed) {
		log.Fatalf("the report failed: %v", err) // DEAD or CANCELLED, with its last error
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("report: %s\n", j.Result)
}

// Watch follows a job's state and progress until it is final.
func ExampleClient_Watch() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "localhost:7070")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for j, err := range c.Watch(ctx, 42) {
		if err != nil {
			log.Fatal(err)
		}
		if p := j.Progress; p != nil {
			fmt.Printf("%s %.0f%% %s\n", j.State, p.Fraction*100, p.Message)
		}
	}
}
