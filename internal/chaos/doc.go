// Package chaos holds the multi-broker failure test: several `jobwire serve` processes on one
// PostgreSQL database, Go workers and a producer spread across them, brokers killed with SIGKILL
// and restarted at random, and at the end the promises every acknowledged job relies on checked
// in the database: every job finished, no success reported under a stale lease was accepted,
// attempt counts match the attempt history, and every broker reports the same breakers.
//
// It has no code outside its tests. Run it alone with
//
//	scripts/with-postgres.sh go test -count=1 -v ./internal/chaos/
//
// and see chaos_test.go for the knobs (seed, number of brokers, a longer soak).
package chaos
