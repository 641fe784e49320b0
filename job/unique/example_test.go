package unique_test

import (
	"fmt"
	"time"

	"github.com/jobwire/jobwire/job/unique"
)

// One report per customer per hour: two jobs of the same customer in the same hour have one
// key, whatever else their payloads say; the next hour's job has another.
func ExampleOptions_KeyOf() {
	o := unique.Options{Fields: []string{"payload.customer"}, Period: time.Hour}
	at := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
	key := func(payload string, now time.Time) string {
		k, _ := o.KeyOf(unique.Source{Type: "report.build", Queue: "default", Payload: []byte(payload), At: now})
		return k
	}
	first := key(`{"customer": 7, "month": "may"}`, at)
	fmt.Println(first == key(`{"customer": 7, "month": "june"}`, at.Add(59*time.Minute)))
	fmt.Println(first == key(`{"customer": 7}`, at.Add(time.Hour)))
	_, states := o.KeyOf(unique.Source{Type: "report.build", At: at})
	fmt.Println(states.States())
	// Output:
	// true
	// false
	// [SCHEDULED PENDING LEASED RUNNING SUCCEEDED DEAD CANCELLED]
}
