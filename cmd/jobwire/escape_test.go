package main

import (
	"net"
	"path"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// hostile is what a hostile worker or user could put in any string: an escape sequence that
// clears the screen, a C1 control sequence introducer (U+009B), a right-to-left override, a
// carriage return, a bell and a newline. hostileBytes adds a byte that is not UTF-8, which
// only bytes fields (payloads) can carry.
const (
	hostile      = "a\x1b[2Jbc\u009bd\u202ee\rf\ag\nh"
	hostileBytes = hostile + "\x9bi"
)

func TestDisplay(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"plain text, \"quoted\" and \\ kept", "plain text, \"quoted\" and \\ kept"},
		{"héllo wörld ✓ 日本", "héllo wörld ✓ 日本"},
		{hostileBytes, `a\x1b[2Jbc\u009bd\u202ee\rf\ag\nh\x9bi`},
		{"tab\there", `tab\there`},
		{"\x7f\u2028\u2066", `\x7f\u2028\u2066`},
		{"real \uFFFD stays", "real \uFFFD stays"},
	}
	for _, tt := range tests {
		if got := display(tt.in); got != tt.want {
			t.Errorf("display(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if got := display(display(tt.in)); got != tt.want {
			t.Errorf("display is not idempotent on %q: %q", tt.in, got)
		}
	}
}

// fill sets every field of m, at every depth, to a hostile value: strings and bytes to
// hostile, map keys too, one element in every list. Numbers are 1 and enums their first value.
func fill(m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.ContainingOneof() != nil && i > 0 && fields.Get(i-1).ContainingOneof() == fd.ContainingOneof() {
			continue // one member of a oneof is enough
		}
		switch {
		case fd.IsList():
			if fd.Message() != nil && depth > 3 {
				continue
			}
			list := m.Mutable(fd).List()
			if fd.Message() != nil {
				v := list.NewElement()
				fill(v.Message(), depth+1)
				list.Append(v)
			} else {
				list.Append(scalar(fd))
			}
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			key := protoreflect.ValueOfString(hostile).MapKey()
			if fd.MapKey().Kind() != protoreflect.StringKind {
				key = scalar(fd.MapKey()).MapKey()
			}
			if fd.MapValue().Message() != nil {
				v := mp.NewValue()
				fill(v.Message(), depth+1)
				mp.Set(key, v)
			} else {
				mp.Set(key, scalar(fd.MapValue()))
			}
		case fd.Message() != nil:
			if depth > 3 {
				continue
			}
			fill(m.Mutable(fd).Message(), depth+1)
		default:
			m.Set(fd, scalar(fd))
		}
	}
}

func scalar(fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(hostile)
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(hostileBytes))
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(1)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(1)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(1)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(1)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(1)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(1)
	}
	return protoreflect.ValueOfInt64(1)
}

// startHostileBroker answers every RPC of every service with its response type filled by
// fill, or, with fail, with an error whose message is hostile. It registers no service: the
// unknown-service handler answers them all, so services added later are covered too.
func startHostileBroker(t *testing.T, fail bool) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	answer := func(_ any, stream grpc.ServerStream) error {
		full, _ := grpc.MethodFromServerStream(stream)
		svc, method := path.Split(full)
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(strings.Trim(svc, "/") + "." + method))
		if err != nil {
			return status.Errorf(codes.Unimplemented, "no method %s", full)
		}
		md := d.(protoreflect.MethodDescriptor)
		in, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
		if err != nil {
			return err
		}
		if err := stream.RecvMsg(in.New().Interface()); err != nil {
			return err
		}
		if fail {
			return status.Error(codes.NotFound, hostile)
		}
		out, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
		if err != nil {
			return err
		}
		resp := out.New()
		fill(resp, 0)
		return stream.SendMsg(resp.Interface())
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(answer))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// hostileArgs runs each command that talks to the broker. A command added to the table must be
// added here, so that its output is checked too.
var hostileArgs = map[string][][]string{
	"enqueue":            {{"--type", "t"}, {"--type", "t", "--idempotency-key", hostile}, {"--type", "t", "--unique-key", hostile}},
	"job get":            {{"1"}},
	"job cancel":         {{"1"}},
	"job run-now":        {{"1"}},
	"job retry-now":      {{"1"}},
	"job delete":         {{"1"}},
	"job priority":       {{"1", "2"}},
	"graph enqueue":      {{"testdata/graph.json"}},
	"graph get":          {{"1"}},
	"graph cancel":       {{"1"}},
	"jobs list":          {nil},
	"dlq list":           {nil},
	"dlq show":           {{"1"}},
	"dlq requeue":        {{"1"}, {"--all-matching", "--type", "t"}, {"--all-matching", "--type", "t", "--yes"}},
	"dlq purge":          {{"1"}, {"--all-matching", "--type", "t"}, {"--all-matching", "--type", "t", "--yes"}},
	"dlq top":            {nil},
	"queues list":        {nil},
	"queues pause":       {{hostile}},
	"queues resume":      {{hostile}},
	"queues set-limit":   {{hostile, "3"}},
	"stats":              {nil},
	"concurrency list":   {nil},
	"concurrency set":    {{hostile, "--key", "payload.customer", "--max-running", "1"}},
	"concurrency remove": {{hostile}},
	"breakers list":      {nil},
	"breakers reset":     {{hostile}},
	"breakers force":     {{hostile, "open"}},
	"purge-succeeded":    {{"--older-than", "1d"}},
	"tokens create":      {{"--role", "worker", "--name", "n"}},
	"tokens list":        {nil},
	"tokens revoke":      {{hostile}},
	"top":                {{"--count", "2", "--interval", "100ms"}},
	"workers":            {nil},
	"brokers":            {nil},
	"audit list":         {nil, {"--actor", hostile}},
	"schedules list":     {nil},
	"schedules get":      {{hostile}},
	"schedules add":      {{hostile, "--cron", "@daily", "--type", "t"}},
	"schedules update":   {{hostile, "--cron", "@hourly"}},
	"schedules remove":   {{hostile}},
	"schedules pause":    {{hostile, "--note", hostile}},
	"schedules resume":   {{hostile}},
	"schedules trigger":  {{hostile}},
	"schedules backfill": {{hostile, "--from", "2030-01-01T00:00:00Z", "--to", "2030-01-02T00:00:00Z"}},
	"batches list":       {nil},
	"batches get":        {{"1"}},
	"batches create":     {{"--description", hostile, "--on-complete", "t"}},
	"batches close":      {{"1"}},
	"ratelimits list":    {nil},
	"ratelimits set":     {{hostile, "5/s"}, {"n", "5/1m", "--key", hostile, "--type", hostile}},
	"ratelimits remove":  {{hostile}},
	"job wait":           {{"1"}, {"1", "2"}},
	"job watch":          {{"1"}},
}

// noBroker are the commands that do not talk to a broker.
var noBroker = map[string]bool{"serve": true, "migrate": true, "version": true, "help": true}

// Whatever a hostile worker or user put in a string, no command prints a control character
// (but its own line breaks) or a byte that is not UTF-8, on stdout or stderr, in text or JSON,
// from an answer or from an error.
func TestOutputEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	answers, errs := startHostileBroker(t, false), startHostileBroker(t, true)
	for _, c := range commands {
		if noBroker[c.name] {
			continue
		}
		runs, ok := hostileArgs[c.name]
		if !ok {
			t.Errorf("command %q has no entry in hostileArgs", c.name)
			continue
		}
		for _, args := range runs {
			for _, addr := range []string{answers, errs} {
				for _, mode := range [][]string{nil, {"--json"}} {
					line := append(append(append(strings.Fields(c.name), args...), mode...), "--addr", addr)
					r := runCLI(t, nil, line...)
					for name, out := range map[string]string{"stdout": r.stdout, "stderr": r.stderr} {
						if bad, ok := firstUnsafe(out); ok {
							t.Errorf("%q: %s holds %q:\n%s", line, name, bad, out)
						}
					}
					if addr == answers && r.code != 0 {
						t.Errorf("%q: exit %d, stderr %q", line, r.code, r.stderr)
					}
				}
			}
		}
	}
}

// firstUnsafe finds the first thing in s a terminal could act on.
func firstUnsafe(s string) (string, bool) {
	for i, r := range s {
		if r == utf8.RuneError && !isRealReplacement(s[i:]) {
			return s[i : i+1], true
		}
		if r != '\n' && needsEscape(r) {
			return string(r), true
		}
	}
	return "", false
}
