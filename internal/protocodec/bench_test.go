package protocodec

import (
	"testing"

	"google.golang.org/grpc/mem"

	"google.golang.org/protobuf/proto"
)

// The hot messages read by protobuf, by the generated code alone, and by the codec (the
// generated code after scan).
func BenchmarkUnmarshal(b *testing.B) {
	msgs := hotMessages()
	wire := make([][]byte, len(msgs))
	slices := make([]mem.BufferSlice, len(msgs)) // as gRPC hands them over: made once, no cost here
	for i, m := range msgs {
		wire[i] = marshal(b, m)
		slices[i] = mem.BufferSlice{mem.SliceBuffer(wire[i])}
	}
	run := func(b *testing.B, read func(int, proto.Message) error) {
		for b.Loop() {
			for i, m := range msgs {
				if err := read(i, m.ProtoReflect().New().Interface()); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("protobuf", func(b *testing.B) { run(b, func(i int, m proto.Message) error { return proto.Unmarshal(wire[i], m) }) })
	b.Run("generated", func(b *testing.B) {
		run(b, func(i int, m proto.Message) error { return m.(vtMessage).UnmarshalVT(wire[i]) })
	})
	b.Run("codec", func(b *testing.B) {
		run(b, func(i int, m proto.Message) error { return Codec.Unmarshal(slices[i], m) })
	})
}

func BenchmarkMarshal(b *testing.B) {
	msgs := hotMessages()
	b.Run("protobuf", func(b *testing.B) {
		for b.Loop() {
			for _, m := range msgs {
				if _, err := proto.Marshal(m); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("codec", func(b *testing.B) {
		for b.Loop() {
			for _, m := range msgs {
				if _, err := Codec.Marshal(m); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
