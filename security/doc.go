// Package security holds the attack suite: each test plays an attacker against a real broker on
// loopback (anonymous calls, calls beyond a token's role or scope, resource exhaustion) and
// checks that the broker refuses cleanly. One file per topic; the package has no code of its
// own.
package security
