// Package conformance checks that the worker libraries of every language behave the same against a
// real broker. The suite lives in the package's tests: it builds the jobwire command and the Go
// conformance worker, then for each language starts broker and worker processes and drives them
// through the Go client, one scenario at a time (payload round trip, fatal and transient failures,
// retry-after, heartbeats, cancellation, a killed worker, graceful drain, worker and broker
// restarts, a broker frozen past a lease, TLS, results and progress, parents' results). Every
// scenario runs twice per language: with the broker on a SQLite file, and on a PostgreSQL schema
// of the server JOBWIRE_TEST_POSTGRES names (the columns "go-pg" and so on; skipped without a
// server, a failure under CI).
//
// Run it with
//
//	go test ./conformance -v -run TestConformance
//
// Python runs in $JOBWIRE_PYTHON, else the virtual environment of the pinned PyPI packages that
// `make sdk-deps` builds in .bin/python, else /usr/bin/python3 with Debian's grpcio and protobuf;
// Node.js needs `node` and `npm ci` in `sdks/node` (`make sdk-deps`); Java needs `java` (17 or later) and `mvn`,
// with which the suite builds and installs sdks/java once (Maven Central for what the local
// repository lacks). A language whose runtime is missing is skipped, unless
// JOBWIRE_CONFORMANCE_STRICT=1 is set, which turns a missing runtime into a failure (for CI).
// -short skips the whole suite.
//
// After the run the suite prints a table of scenarios by language (visible with -v or on failure);
// JOBWIRE_CONFORMANCE_REPORT=FILE writes it to FILE as well.
package conformance
