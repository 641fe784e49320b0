package protocodec

import (
	"testing"

	"google.golang.org/protobuf/proto"
)

// The hot messages read by protobuf, by the generated code alone, and by the codec (the
// generated code after scan).
func BenchmarkUnmarshal(b *testing.B) {
	msgs := hotMessages()
	wire := make([][]byte, len(msgs))
	for i, m := range msgs {
		wire[i] = marshal(b, m)
	}
	run := func(b *testing.B, read func([]byte, proto.Message) error) {
		for b.Loop() {
			for i, m := range msgs {
				if err := read(wire[i], m.ProtoReflect().New().Interface()); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("protobuf", func(b *testing.B) { run(b, proto.Unmarshal) })
	b.Run("generated", func(b *testing.B) {
		run(b, func(w []byte, m proto.Message) error { return m.(vtMessage).UnmarshalVT(w) })
	})
	b.Run("codec", func(b *testing.B) { run(b, unmarshal) })
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
