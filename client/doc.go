// Package client is the Go SDK for producing jobs to a Jobwire broker and operating it.
//
// A Client wraps one gRPC connection and is safe for concurrent use; make one per process:
//
//	c, err := client.Dial(ctx, "127.0.0.1:7070")
//	if err != nil {
//		return err
//	}
//	defer c.Close()
//
//	res, err := c.EnqueueJSON(ctx, "email.send", map[string]string{"to": "ada@example.com"},
//		client.Queue("mail"),
//		client.Priority(5),
//		client.Delay(time.Minute),
//		client.MaxAttempts(3),
//		client.IdempotencyKey("welcome-ada"),
//	)
//	if err != nil {
//		return err
//	}
//	if res.Duplicate {
//		log.Printf("job %d was already enqueued", res.ID)
//	}
//
// DialEnv connects to the broker that JOBWIRE_ADDR, JOBWIRE_TOKEN and the JOBWIRE_TLS_*
// variables name, as the jobwire command does. A failed TLS handshake, TLS on one side only or
// a refused token cannot be fixed by retrying: errors.Is(err, ErrTLS) or errors.Is(err, ErrAuth)
// holds for such an error, and Classify returns it as a *ConnectError that says what to fix.
//
// Enqueue returns after the broker has committed the job, so a job that was acknowledged is
// never lost. When an enqueue fails ambiguously (ErrUnavailable, a deadline) it may or may not
// have been stored: retry it with the same IdempotencyKey and the broker returns the first job
// instead of making a second.
//
// Jobs come back as job.Job values, the same type the broker uses internally. The admin
// methods (ListDeadJobs, RequeueDeadJobs, PauseQueue, GetStats, ForceBreaker, ...) cover the
// whole jobwire.v1 AdminService; AllJobs and AllDeadJobs walk every page of a listing.
//
// # Errors
//
// Every error from a call that reached the broker is an *Error holding the operation, the gRPC
// code and the broker's message. Test for the common cases with errors.Is:
//
//	j, err := c.Get(ctx, id)
//	switch {
//	case errors.Is(err, client.ErrNotFound):
//		// no such job
//	case errors.Is(err, client.ErrUnavailable):
//		// broker down or restarting: retry later
//	}
//
// and read the details with errors.As:
//
//	var cerr *client.Error
//	if errors.As(err, &cerr) {
//		log.Printf("%s failed with %s: %s", cerr.Op, cerr.Code, cerr.Message)
//	}
//
// This package produces and administers; workers instead hold a stream to the broker's
// WorkerService.
package client
