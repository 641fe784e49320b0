// Package worker runs jobs handed out by a Jobwire broker.
//
// A Worker holds one WorkerService.Connect stream to the broker at a time. Over a connection to
// several brokers on one database (client.DialBrokers) that stream goes to one that is up, and
// after a broker goes away the worker reconnects to another, naming the leases it holds. It registers the job
// types it has handlers for, receives assignments up to its concurrency, runs each handler with a
// context that is cancelled when the broker cancels the job, when the attempt timeout passes or
// when the lease is lost, heartbeats the leases it holds, and reports every outcome until the
// broker acknowledges it, across reconnects.
//
// Handlers signal how a failure should be treated through the error they return: Fatal marks a
// failure no retry can fix, RetryAfter asks for a specific delay, and everything else is retried
// with the broker's backoff. Classify documents the rules.
//
// Each failure carries an error type, the name the dead-letter queue groups failures under: a
// name given with ErrorType or RegisterError, else the Go type of the error deepest in the chain
// that has one of its own ("*json.SyntaxError", "*pgconn.PgError", "io.EOF" for the standard
// sentinels). An error made only of errors.New and fmt.Errorf names no kind of failure; its type
// is reported as "error", never as the implementation detail "*errors.errorString", and the
// broker groups such dead jobs by the shape of their message instead.
//
// Run blocks until its context is cancelled, then shuts down gracefully: it tells the broker to
// send no more work, hands back jobs that never started, lets running handlers finish within
// Options.ShutdownGrace and waits for their results to be acknowledged.
package worker
