package jobkey_test

import (
	"fmt"
	"testing"

	"github.com/jobwire/jobwire/job/jobkey"
)

func TestKeyOfAJob(t *testing.T) {
	src := jobkey.Source{
		Type:     "report.build",
		Queue:    "reports",
		Metadata: map[string]string{"customer": "acme"},
		Payload:  []byte(`{"customer_id": "c-42", "n": 7, "flag": true, "nested": {"id": "x\u00e9"}, "list": [1], "obj": {}, "nil": null}`),
	}
	tests := []struct {
		expr string
		want string
		ok   bool
	}{
		{"", "", true},
		{"type", "report.build", true},
		{"queue", "reports", true},
		{"metadata.customer", "acme", true},
		{"metadata.region", "", false},
		{"payload.customer_id", "c-42", true},
		{"payload.n", "7", true},
		{"payload.flag", "true", true},
		{"payload.nil", "null", true},
		{"payload.nested.id", "xé", true},
		{"payload.list", "", false},
		{"payload.obj", "", false},
		{"payload.missing", "", false},
		{"payload.customer_id.deeper", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			e, err := jobkey.Parse(tt.expr)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := e.Of(src)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("Of = %q, %v; want %q, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestPayloadThatIsNotAnObjectHasNoKey(t *testing.T) {
	e, _ := jobkey.Parse("payload.id")
	for _, p := range []string{``, `[]`, `"id"`, `not json`, `{"id": `} {
		if k, ok := e.Of(jobkey.Source{Payload: []byte(p)}); ok {
			t.Errorf("payload %q: got key %q, want none", p, k)
		}
	}
}

func TestBadExpressionsAreRefusedWithTheirSyntax(t *testing.T) {
	for _, s := range []string{"metadata.", "payload.", "payload.a..b", "customer", "Type"} {
		if _, err := jobkey.Parse(s); err == nil {
			t.Errorf("Parse(%q) accepted it", s)
		}
	}
}

func ExampleExpr_Of() {
	e, _ := jobkey.Parse("payload.customer_id")
	key, ok := e.Of(jobkey.Source{Type: "sync", Payload: []byte(`{"customer_id": "acme"}`)})
	fmt.Println(key, ok)
	// Output: acme true
}
