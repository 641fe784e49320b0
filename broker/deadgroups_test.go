package broker

import "testing"

func TestFingerprint(t *testing.T) {
	t.Parallel()
	tests := []struct{ msg, want string }{
		{"order 1234 not found", "order <n> not found"},
		{"order 77 not found (req 9f86d081)", "order <n> not found (req <hex>)"},
		{"job 3f2a8c1e-7b4d-4e2a-9c1f-0a1b2c3d4e5f: timeout after 1.5s", "job <uuid>: timeout after <n>.<n>s"},
		{"bad pointer 0xc000123abc", "bad pointer <hex>"},
		{"facade decade defaced", "facade decade defaced"},
		{"dial tcp 10.0.0.7:5432: connection refused", "dial tcp <n>.<n>.<n>.<n>:<n>: connection refused"},
	}
	for _, tt := range tests {
		if got := Fingerprint(tt.msg); got != tt.want {
			t.Errorf("Fingerprint(%q) = %q, want %q", tt.msg, got, tt.want)
		}
	}
}
