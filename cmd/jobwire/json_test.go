package main

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// The --json shape is a promise to scripts (docs/operating.md): this is it for a job. Fields
// added to the API later may appear between these lines; none of these may change.
func TestJSONShapeOfAJob(t *testing.T) {
	t.Parallel()
	fb := startBroker(t, map[string]handler{"GetJob": reply(&jobwirev1.GetJobResponse{Job: deadJob})})
	r := runAt(t, fb.addr, "job", "get", "42", "--json")
	wantOK(t, r)
	want := `{
  "job": {
    "id": 42,
    "type": "email.send",
    "queue": "mail",
    "payload": {
      "to": "ada"
    },
    "priority": 5,
    "state": "dead",
    "attempts": 2,
    "maxAttempts": 2,
    "runAt": "2030-06-01T11:00:00Z",
    "createdAt": "2030-06-01T10:00:00Z",
    "finishedAt": "2030-06-01T11:59:00Z",
    "idempotencyKey": "",
    "attemptTimeout": "60s",
    "deadReason": "max_attempts_exhausted",
    "lastErrorType": "SMTPError",
    "lastErrorMessage": "451 try later",
    "attemptHistory": [
      {
        "number": 1,
        "workerId": "w-1",
        "startedAt": "2030-06-01T11:00:00Z",
        "finishedAt": "2030-06-01T11:00:02Z",
        "outcome": "failed",
        "failureKind": "transient",
        "errorType": "SMTPError",
        "message": "451 try later",
        "details": "at send()\nat main()"
      },
      {
        "number": 2,
        "workerId": "w-2",
        "startedAt": "2030-06-01T11:58:00Z",
        "finishedAt": null,
        "outcome": "lease_expired",
        "failureKind": null,
        "errorType": "",
        "message": "",
        "details": ""
      }
    ],
    "metadata": {},
    "result": null,
    "progress": null,
    "uniqueKey": "",
    "uniqueStates": [],
    "dependencies": null,
    "concurrencyKey": "",
    "concurrencyLimit": 0,
    "concurrencyRule": "",
    "batchId": 0,
    "rateKey": ""
  },
  "waiting": null
}
`
	wantContains(t, r.stdout, strings.SplitAfter(want, "\n")...)
}

func TestJSONEdgeCases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		job  *jobwirev1.Job
		want []string // each in the output
		not  []string // none in the output
	}{
		{"non-JSON payload is base64 beside a null payload",
			&jobwirev1.Job{Id: 1, Payload: []byte{0xff, 0x00, 'x'}},
			[]string{`"payload": null,` + "\n    \"payloadBase64\": \"/wB4\","}, nil},
		{"no payload is null", &jobwirev1.Job{Id: 1}, []string{`"payload": null,`}, []string{"payloadBase64"}},
		{"a JSON string payload stays a string", &jobwirev1.Job{Payload: []byte(`"hi <b>"`)}, []string{`"payload": "hi <b>",`}, nil},
		{"an indented payload is compacted", &jobwirev1.Job{Payload: []byte("{\n  \"a\": [1, 2]\n}")},
			[]string{"\"payload\": {\n      \"a\": [\n        1,\n        2\n      ]\n    },"}, nil},
		{"large ids are whole numbers", &jobwirev1.Job{Id: 1 << 53}, []string{`"id": 9007199254740992,`}, nil},
		{"durations are seconds", &jobwirev1.Job{AttemptTimeout: durationpb.New(1500 * time.Millisecond)}, []string{`"attemptTimeout": "1.5s",`}, nil},
		{"times keep their fraction", &jobwirev1.Job{RunAt: timestamppb.New(time.Date(2030, 1, 2, 3, 4, 5, 600, time.UTC))},
			[]string{`"runAt": "2030-01-02T03:04:05.0000006Z",`}, nil},
		{"terminal controls in strings are escaped", &jobwirev1.Job{Type: "a\x1b[2Jb\u009bc\u202ed\x7f"},
			[]string{`"type": "a\u001b[2Jb\u009bc\u202ed\u007f",`}, []string{"\x1b", "\u009b", "\u202e", "\x7f"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out strings.Builder
			if err := printJSON(&out, &jobwirev1.GetJobResponse{Job: tt.job}); err != nil {
				t.Fatal(err)
			}
			decodeJSON(t, out.String())
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, n := range tt.not {
				if strings.Contains(out.String(), n) {
					t.Errorf("output holds %q:\n%s", n, out.String())
				}
			}
		})
	}
}

func TestJSONQueueDepthUsesStateNames(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	err := printJSON(&out, &jobwirev1.ListQueuesResponse{Queues: []*jobwirev1.QueueInfo{{Name: "mail",
		DepthByState: map[string]int64{"PENDING": 3, "DEAD": 1}, OldestReadyAge: durationpb.New(90 * time.Second)}}})
	if err != nil {
		t.Fatal(err)
	}
	wantContains(t, out.String(), `"name": "mail"`, `"paused": false`, `"concurrencyLimit": 0`,
		`"depthByState": {`, `"dead": 1,`, `"pending": 3`, `"running": 0`, `"oldestReadyAge": "90s"`)
}
