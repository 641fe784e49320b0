package job

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// SecretSize is how many random bytes a lease token carries: 128 bits, so a token cannot be
// guessed even by someone who knows the job id and how many times it was leased.
const SecretSize = 16

// LeaseToken is a lease's fencing token. Seq counts the job's leases, so a later lease of a job
// has a larger Seq (handy in logs and when ordering a worker's leases); Secret is random, so
// holding a lease takes having been handed its token. Two tokens are the same lease only when
// both parts are equal. The zero token is no lease.
type LeaseToken struct {
	Seq    int64
	Secret [SecretSize]byte
}

// NewLeaseToken is the token of a job's lease after one with seq: the next number and a fresh
// secret read from random: nil means crypto/rand.Reader, the production source; tests may pass
// a seeded one for repeatable tokens.
func NewLeaseToken(seq int64, random io.Reader) (LeaseToken, error) {
	if random == nil {
		random = rand.Reader
	}
	t := LeaseToken{Seq: seq + 1}
	if _, err := io.ReadFull(random, t.Secret[:]); err != nil {
		return LeaseToken{}, fmt.Errorf("lease token: read random secret: %w", err)
	}
	return t, nil
}

// IsZero reports whether t names no lease.
func (t LeaseToken) IsZero() bool { return t == LeaseToken{} }

// String is the token's wire form: the decimal Seq, a dot and the secret as 32 lower-case hex
// digits, e.g. "3.9f86d081884c7d659a2feaa0c55ad015". The zero token is "".
func (t LeaseToken) String() string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(t.Seq, 10) + "." + hex.EncodeToString(t.Secret[:])
}

// errBadToken is returned for text that is not a token's wire form.
var errBadToken = errors.New("a lease token is a positive number, a dot and 32 hex digits")

// ParseLeaseToken reads a token's wire form (see String).
func ParseLeaseToken(s string) (LeaseToken, error) {
	seq, secret, ok := strings.Cut(s, ".")
	if !ok || len(secret) != 2*SecretSize || len(seq) == 0 || len(seq) > 19 {
		return LeaseToken{}, errBadToken
	}
	n, err := strconv.ParseInt(seq, 10, 64)
	if err != nil || n <= 0 || seq[0] == '+' || seq[0] == '0' {
		return LeaseToken{}, errBadToken
	}
	t := LeaseToken{Seq: n}
	if _, err := hex.Decode(t.Secret[:], []byte(secret)); err != nil || strings.ToLower(secret) != secret {
		return LeaseToken{}, errBadToken
	}
	return t, nil
}
