package protocodec

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// hotMessages are the messages of a job's way through the broker, filled as they are sent.
func hotMessages() []proto.Message {
	now := timestamppb.New(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	token := "0123456789abcdef"
	payload := []byte(`{"to":"ana@example.com","n":12345}`)
	return []proto.Message{
		&jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "email.send", Payload: payload, Queue: "default",
			MaxAttempts: 5, Metadata: map[string]string{"tenant": "acme"}, DependsOn: []int64{7, 8}}},
		&jobwirev1.EnqueueResponse{Job: &jobwirev1.EnqueuedJob{Id: 123456, State: jobwirev1.JobState_JOB_STATE_RUNNING, RunAt: now}},
		&jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_Assignment{Assignment: &jobwirev1.Assignment{
			Job: &jobwirev1.Job{Id: 123456, Type: "email.send", Queue: "default", Payload: payload,
				State: jobwirev1.JobState_JOB_STATE_RUNNING, Attempts: 1, MaxAttempts: 5, RunAt: now, CreatedAt: now},
			Attempt: 1, LeaseToken: token, LeaseDeadline: now, AttemptTimeout: durationpb.New(time.Minute)}}},
		&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Started{Started: &jobwirev1.Started{JobId: 123456, LeaseToken: token}}},
		&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Result{Result: &jobwirev1.Result{JobId: 123456, LeaseToken: token,
			Outcome: &jobwirev1.Result_Success{Success: &jobwirev1.Success{Result: []byte("ok")}}}}},
		&jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_ResultAck{ResultAck: &jobwirev1.ResultAck{JobId: 123456,
			LeaseToken: token, Decision: jobwirev1.Decision_DECISION_SUCCEEDED}}},
	}
}

func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	data, err := Codec.Marshal(m)
	if err != nil {
		t.Fatalf("Marshal %T: %v", m, err)
	}
	return data.Materialize()
}

func unmarshal(b []byte, m proto.Message) error {
	return Codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, m)
}

// What the codec writes, protobuf reads as the same message, and the codec reads what
// protobuf writes.
func TestRoundTripsWithProtobuf(t *testing.T) {
	for _, m := range hotMessages() {
		got := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(marshal(t, m), got); err != nil || !proto.Equal(got, m) {
			t.Errorf("%T: protobuf read back %v (%v), want %v", m, got, err, m)
		}
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got = m.ProtoReflect().New().Interface()
		if err := unmarshal(b, got); err != nil || !proto.Equal(got, m) {
			t.Errorf("%T: the codec read back %v (%v), want %v", m, got, err, m)
		}
	}
}

// Unmarshal replaces what the message held, as proto.Unmarshal does (the generated code
// alone would merge: a stream's reused message would keep the last one's fields).
func TestUnmarshalReplaces(t *testing.T) {
	m := &jobwirev1.Started{JobId: 1, LeaseToken: "old"}
	if err := unmarshal(marshal(t, &jobwirev1.Started{JobId: 2}), m); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(m, &jobwirev1.Started{JobId: 2}) {
		t.Fatalf("got %v, want job_id 2 and no lease token", m)
	}
}

// Every string field of every jobwire.v1 message, at any depth (in a map, a list, a oneof, a
// message of a message), is refused when it holds invalid UTF-8, as proto.Unmarshal refuses
// it, with the words the broker answers INVALID_ARGUMENT for; the same message with valid
// UTF-8 there is read as protobuf reads it.
func TestUnmarshalRefusesInvalidUTF8InEveryStringField(t *testing.T) {
	checked := 0
	protoregistry.GlobalTypes.RangeMessages(func(mt protoreflect.MessageType) bool {
		md := mt.Descriptor()
		if md.ParentFile().Package() != "jobwire.v1" {
			return true
		}
		for _, path := range stringPaths(md, nil, map[protoreflect.FullName]bool{}) {
			name := string(md.Name()) + "." + pathName(path)
			valid, bad := withString(mt, path, "ok"), withString(mt, path, "ok\xff")
			if err := proto.Unmarshal(bad, mt.New().Interface()); err == nil {
				t.Fatalf("%s: protobuf accepts invalid UTF-8 there; the test builds its input wrongly", name)
			}
			err := unmarshal(bad, mt.New().Interface())
			if err == nil || !strings.Contains(err.Error(), "invalid UTF-8") {
				t.Errorf("%s holding invalid UTF-8: Unmarshal returned %v, want an error saying invalid UTF-8", name, err)
			}
			want, got := mt.New().Interface(), mt.New().Interface()
			if err := proto.Unmarshal(valid, want); err != nil {
				t.Fatal(err)
			}
			if err := unmarshal(valid, got); err != nil || !proto.Equal(got, want) {
				t.Errorf("%s holding valid UTF-8: Unmarshal gave %v (%v), want %v", name, got, err, want)
			}
			checked++
		}
		return true
	})
	if checked < 100 {
		t.Fatalf("checked %d string fields; jobwire.v1 has more: the walk misses some", checked)
	}
}

// stringPaths lists the ways from md to each string field below it (each step a field; a
// map's entry counts as a message), not entering a message type already on the way.
func stringPaths(md protoreflect.MessageDescriptor, prefix []protoreflect.FieldDescriptor, seen map[protoreflect.FullName]bool) [][]protoreflect.FieldDescriptor {
	if seen[md.FullName()] {
		return nil
	}
	seen[md.FullName()] = true
	defer delete(seen, md.FullName())
	var paths [][]protoreflect.FieldDescriptor
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		path := append(append([]protoreflect.FieldDescriptor(nil), prefix...), fd)
		switch {
		case fd.IsMap():
			for _, sub := range []protoreflect.FieldDescriptor{fd.MapKey(), fd.MapValue()} {
				subPath := append(append([]protoreflect.FieldDescriptor(nil), path...), sub)
				switch sub.Kind() {
				case protoreflect.StringKind:
					paths = append(paths, subPath)
				case protoreflect.MessageKind:
					paths = append(paths, stringPaths(sub.Message(), subPath, seen)...)
				}
			}
		case fd.Kind() == protoreflect.StringKind:
			paths = append(paths, path)
		case fd.Kind() == protoreflect.MessageKind:
			paths = append(paths, stringPaths(fd.Message(), path, seen)...)
		}
	}
	return paths
}

func pathName(path []protoreflect.FieldDescriptor) string {
	names := make([]string, len(path))
	for i, fd := range path {
		names[i] = string(fd.Name())
	}
	return strings.Join(names, ".")
}

// withString is the wire form of a message of type mt whose field at path holds s, marshalled
// by the generated code, which does not check UTF-8.
func withString(mt protoreflect.MessageType, path []protoreflect.FieldDescriptor, s string) []byte {
	m := mt.New()
	set(m, path, s)
	b, err := m.Interface().(interface{ MarshalVT() ([]byte, error) }).MarshalVT()
	if err != nil {
		panic(err)
	}
	return b
}

// set puts s at path below m, making each message (or list element, or map entry) on the way.
func set(m protoreflect.Message, path []protoreflect.FieldDescriptor, s string) {
	fd := path[0]
	switch {
	case fd.IsMap():
		entries := m.Mutable(fd).Map()
		key, value := protoreflect.ValueOfString("k"), entries.NewValue()
		switch {
		case path[1].Number() == 1:
			key = protoreflect.ValueOfString(s)
		case path[1].Kind() == protoreflect.StringKind:
			value = protoreflect.ValueOfString(s)
		default:
			set(value.Message(), path[2:], s)
		}
		entries.Set(key.MapKey(), value)
	case fd.IsList() && fd.Kind() == protoreflect.StringKind:
		m.Mutable(fd).List().Append(protoreflect.ValueOfString(s))
	case fd.IsList():
		l := m.Mutable(fd).List()
		e := l.NewElement()
		set(e.Message(), path[1:], s)
		l.Append(e)
	case fd.Kind() == protoreflect.StringKind:
		m.Set(fd, protoreflect.ValueOfString(s))
	default:
		set(m.Mutable(fd).Message(), path[1:], s)
	}
}

// The codec accepts exactly what protobuf accepts, and reads it as protobuf does.
func FuzzUnmarshalAgreesWithProtobuf(f *testing.F) {
	for _, m := range hotMessages() {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("\x0a\x03\x0a\x01\xff"))
	types := []proto.Message{&jobwirev1.EnqueueRequest{}, &jobwirev1.ConnectRequest{}, &jobwirev1.ConnectResponse{},
		&jobwirev1.EnqueueResponse{}, &jobwirev1.EnqueueBatchRequest{}}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, typ := range types {
			want, got := typ.ProtoReflect().New().Interface(), typ.ProtoReflect().New().Interface()
			errWant, errGot := proto.Unmarshal(b, want), unmarshal(b, got)
			if (errWant == nil) != (errGot == nil) {
				t.Fatalf("%T from %q: protobuf says %v, the codec %v", typ, b, errWant, errGot)
			}
			if errWant == nil && !proto.Equal(got, want) {
				t.Fatalf("%T from %q: the codec read %v, protobuf %v", typ, b, got, want)
			}
		}
	})
}

// A message nested deeper than protobuf reads (10,000) is refused as protobuf refuses it; the
// generated code alone would follow it down, however deep.
func TestUnmarshalRefusesNestingProtobufRefuses(t *testing.T) {
	for _, levels := range []int{100, 6000} { // two messages deep a level
		b := []byte{}
		for range levels {
			batch := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), b)
			b = protowire.AppendBytes(protowire.AppendTag(nil, 7, protowire.BytesType), batch)
		}
		errWant := proto.Unmarshal(b, &jobwirev1.ConnectRequest{})
		errGot := unmarshal(b, &jobwirev1.ConnectRequest{})
		if (errWant == nil) != (levels == 100) {
			t.Fatalf("%d levels: protobuf says %v; the test's limits are wrong", levels, errWant)
		}
		if (errGot == nil) != (errWant == nil) {
			t.Errorf("%d levels: the codec says %v, protobuf %v", levels, errGot, errWant)
		}
	}
}
