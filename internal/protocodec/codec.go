// Package protocodec is the gRPC codec of the broker and the Go SDKs: protobuf, as gRPC's own
// codec, but marshalled and unmarshalled by the unrolled code protoc-gen-go-vtproto generates
// beside each message (gen/jobwire/v1/*_vtproto.pb.go) instead of by reflection over the
// message's descriptor: about a third of protobuf's time to marshal, and 0.7-0.8x its time to
// unmarshal, where the generated code alone takes half and the checks below most of the rest
// (BenchmarkMarshal, BenchmarkUnmarshal); a few percent of the broker's and the Go worker's CPU
// a job (docs/performance-log.md).
//
// It accepts exactly what proto.Unmarshal accepts, and reads it alike
// (FuzzUnmarshalAgreesWithProtobuf). The generated code neither checks that strings are valid
// UTF-8, which proto3 requires and the broker answers with INVALID_ARGUMENT, nor limits how
// deep messages nest, so Unmarshal checks both on the wire bytes first (scan); and it refuses
// a known field sent with another wire type, which protobuf keeps as unknown, so such input,
// like malformed input, is read by protobuf.
// Messages without generated code (none of jobwire.v1's) go to gRPC's own codec.
package protocodec

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the codec Codec falls back on
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// vtMessage is what protoc-gen-go-vtproto generates for a message (features marshal,
// unmarshal and size).
type vtMessage interface {
	proto.Message
	Reset()
	SizeVT() int
	MarshalToSizedBufferVT([]byte) (int, error)
	UnmarshalVT([]byte) error
}

// Codec is the codec. Its name is gRPC's codec's ("proto"), so the content-type on the wire
// does not change: peers in other languages see plain protobuf.
var Codec encoding.CodecV2 = codec{fallback: encoding.GetCodecV2("proto")}

// callOption makes a call use Codec.
var callOption = grpc.ForceCodecV2(Codec)

type codec struct{ fallback encoding.CodecV2 }

func (codec) Name() string { return "proto" }

// Marshal writes a large message into a buffer of gRPC's pool, as gRPC's codec does, and a
// small one into a buffer of its own.
func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMessage)
	if !ok {
		return c.fallback.Marshal(v)
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if _, err := m.MarshalToSizedBufferVT(buf); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVT((*buf)[:size]); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// Unmarshal replaces v's contents, as proto.Unmarshal does (the generated code merges). The
// buffer goes back to gRPC's pool at once: the generated code copies what it keeps.
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(vtMessage)
	if !ok {
		return c.fallback.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	m.Reset()
	switch err := scan(b, fieldsOf(m.ProtoReflect().Descriptor()), protowire.DefaultRecursionLimit); {
	case errors.Is(err, errInvalidUTF8):
		return err
	case err != nil:
		// Malformed, nested deeper than protobuf reads, or with a field this jobwire.v1 does
		// not know: protobuf reads it, or gives its own error.
		return proto.Unmarshal(b, m)
	}
	if err := m.UnmarshalVT(b); err != nil {
		// The generated code refuses a known field sent with another wire type, which
		// protobuf keeps as an unknown field. Such input is rare enough to read twice.
		m.Reset()
		return proto.Unmarshal(b, m)
	}
	return nil
}

var (
	errInvalidUTF8 = errors.New("invalid UTF-8")
	errTooDeep     = errors.New("exceeds the nesting limit")
	// The generated code keeps unknown fields, but for those inside a google.protobuf.Timestamp
	// or Duration. Unknown fields come from a peer with a newer jobwire.v1, which is rare.
	errUnknownField = errors.New("unknown field")
)

// scan checks b, a message whose fields t describes, before the generated code reads it, for what that code
// does not check:
//   - a string field that is not valid UTF-8 (errInvalidUTF8, in words like proto.Unmarshal's:
//     "contains invalid UTF-8"); every string of a proto3 file is checked (jobwire.v1 is
//     proto3);
//   - messages nested deeper than depth (errTooDeep): the generated code has no limit, and a
//     request of a few megabytes nesting ConnectRequestBatch a million times would grow a
//     goroutine's stack by hundreds of megabytes; protobuf stops at 10,000.
//
// It reads the wire format only and allocates nothing. Malformed input is a parse error, and
// a field t does not know is errUnknownField.
func scan(b []byte, t *fieldTable, depth int) error {
	if depth < 0 {
		return errTooDeep
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		kind := t.kind(num)
		if kind == unknownField {
			return errUnknownField
		}
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		switch kind {
		case stringField:
			if !utf8.Valid(v) {
				return fmt.Errorf("proto: field %s contains %w", t.md.Fields().ByNumber(num).FullName(), errInvalidUTF8)
			}
		case messageField:
			// A map's entries are messages too (key 1, value 2), so its string keys and
			// values are checked here.
			if err := scan(v, t.nested[num], depth-1); err != nil {
				return err
			}
		}
	}
	return nil
}

// fieldKind is what scan needs to know of a field.
type fieldKind uint8

const (
	unknownField fieldKind = iota
	otherField
	stringField
	messageField
)

// fieldTable is a message type's fields by number, so that scan looks each up in a slice
// rather than through the descriptor's lazily built map (that lookup was most of scan's time),
// and holds the tables of its message fields, so that a nested message costs no lookup at all.
type fieldTable struct {
	md     protoreflect.MessageDescriptor
	kinds  []fieldKind
	nested []*fieldTable // of the message fields, by number
}

func (t *fieldTable) kind(num protowire.Number) fieldKind {
	if int(num) >= len(t.kinds) || num < 0 {
		return unknownField
	}
	return t.kinds[num]
}

var (
	fieldTables sync.Map   // protoreflect.FullName -> *fieldTable, each complete with its nested tables
	buildMu     sync.Mutex // one build at a time, so that a type's table is built once
)

// fieldsOf returns md's table, building it and the tables of every message type it reaches the
// first time. A table is published only once every table it reaches is built.
func fieldsOf(md protoreflect.MessageDescriptor) *fieldTable {
	if t, ok := fieldTables.Load(md.FullName()); ok {
		return t.(*fieldTable)
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	built := make(map[protoreflect.FullName]*fieldTable)
	t := buildTable(md, built)
	for name, bt := range built {
		fieldTables.Store(name, bt)
	}
	return t
}

// buildTable builds md's table into built; a type met again (a message that contains itself)
// gets the table already begun.
func buildTable(md protoreflect.MessageDescriptor, built map[protoreflect.FullName]*fieldTable) *fieldTable {
	if t, ok := fieldTables.Load(md.FullName()); ok {
		return t.(*fieldTable)
	}
	if t, ok := built[md.FullName()]; ok {
		return t
	}
	fields := md.Fields()
	size := 0
	for i := 0; i < fields.Len(); i++ {
		size = max(size, int(fields.Get(i).Number())+1)
	}
	t := &fieldTable{md: md, kinds: make([]fieldKind, size), nested: make([]*fieldTable, size)}
	built[md.FullName()] = t
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		switch fd.Kind() {
		case protoreflect.StringKind:
			t.kinds[fd.Number()] = stringField
		case protoreflect.MessageKind:
			t.kinds[fd.Number()] = messageField
			t.nested[fd.Number()] = buildTable(fd.Message(), built)
		default:
			t.kinds[fd.Number()] = otherField
		}
	}
	return t
}

// Conn returns cc with Codec as the codec of every call made through it, for the SDKs' stubs:
// a codec forced per call, rather than registered for the process, leaves the application's
// other gRPC clients on a connection it shares as they were. A codec the caller forces wins.
func Conn(cc grpc.ClientConnInterface) grpc.ClientConnInterface { return conn{cc} }

type conn struct{ grpc.ClientConnInterface }

func (c conn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return c.ClientConnInterface.Invoke(ctx, method, args, reply, append([]grpc.CallOption{callOption}, opts...)...)
}

func (c conn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.ClientConnInterface.NewStream(ctx, desc, method, append([]grpc.CallOption{callOption}, opts...)...)
}
