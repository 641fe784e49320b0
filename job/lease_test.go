package job

import (
	"bytes"
	"strings"
	"testing"
)

func TestLeaseTokenWireForm(t *testing.T) {
	t.Parallel()
	tok, err := NewLeaseToken(2, bytes.NewReader(bytes.Repeat([]byte{0xab}, SecretSize)))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok.String(), "3."+strings.Repeat("ab", SecretSize); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	back, err := ParseLeaseToken(tok.String())
	if err != nil || back != tok {
		t.Fatalf("ParseLeaseToken(%q) = %v, %v; want %v", tok, back, err, tok)
	}
	if (LeaseToken{}).String() != "" || !(LeaseToken{}).IsZero() || tok.IsZero() {
		t.Fatal("the zero token must be empty and only it")
	}
	hex := strings.Repeat("0", 2*SecretSize)
	for _, bad := range []string{"", "3", "3.", "." + hex, "0." + hex, "-1." + hex, "+1." + hex, "01." + hex,
		"3." + hex[1:], "3." + hex + "0", "3." + strings.ToUpper(strings.Repeat("ab", SecretSize)),
		"3." + strings.Repeat("zz", SecretSize), "99999999999999999999." + hex, "3.\x00" + hex[1:]} {
		if _, err := ParseLeaseToken(bad); err == nil {
			t.Errorf("ParseLeaseToken(%q) accepted", bad)
		}
	}
}

func TestNewLeaseTokenNeedsRandomness(t *testing.T) {
	t.Parallel()
	if _, err := NewLeaseToken(1, bytes.NewReader(make([]byte, SecretSize-1))); err == nil {
		t.Fatal("a short random source gave a token")
	}
	a, err := NewLeaseToken(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewLeaseToken(1, nil)
	if a == b || a.Seq != 2 {
		t.Fatalf("two tokens from crypto/rand: %v and %v", a, b)
	}
}
