package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The --json output is for scripts, so its shape is promised (docs/operating.md, "JSON
// output") and differs from protobuf's own JSON mapping where that mapping is awkward to use:
//
//   - every field is present: zero numbers as 0, empty strings as "", empty lists as [],
//     unset messages, times and durations as null, an enum's zero value as null;
//   - 64-bit integers are numbers, not strings;
//   - enum values are lowercase names without their type prefix ("pending", "half_open");
//   - a payload that is JSON is the JSON itself; other bytes go in a field named after it
//     with "Base64" appended, holding standard base64, and the field itself is null;
//   - times are RFC 3339 in UTC, durations seconds with an "s" ("90s", "0.25s");
//   - field names are protobuf's lowerCamelCase JSON names, in the order of the .proto file.
//
// Maps keyed by job state (QueueInfo.depth_by_state) use the same lowercase state names.

// printJSON writes m in the --json shape.
func printJSON(w io.Writer, m proto.Message) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(jsonMessage(m.ProtoReflect())); err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	_, err := io.WriteString(w, escapeJSONControls(buf.String()))
	return err
}

// escapeJSONControls escapes what encoding/json leaves raw in strings but a terminal would
// act on: DEL, the C1 control codes (U+0080 to U+009F, some terminals read U+009B as an escape
// sequence's start) and bidirectional overrides. Outside strings a JSON document holds only
// ASCII punctuation, letters and the encoder's own line breaks, so the replacement can run on
// the whole document.
func escapeJSONControls(doc string) string {
	var b strings.Builder
	for _, r := range doc {
		if r >= 0x7f && needsEscape(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// jsonObject is a JSON object whose members keep their order.
type jsonObject []jsonMember

type jsonMember struct {
	name  string
	value any
}

func (o jsonObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		name, err := json.Marshal(m.name)
		if err != nil {
			return nil, err
		}
		b.Write(name)
		b.WriteByte(':')
		v, err := marshalNoHTMLEscape(m.value)
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// marshalNoHTMLEscape is json.Marshal without the escaping of <, > and & meant for HTML, so
// messages read as they were written.
func marshalNoHTMLEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// jsonMessage converts a message; timestamps and durations become strings.
func jsonMessage(m protoreflect.Message) any {
	switch m.Descriptor().FullName() {
	case "google.protobuf.Timestamp":
		fields := m.Descriptor().Fields()
		t := time.Unix(m.Get(fields.ByName("seconds")).Int(), m.Get(fields.ByName("nanos")).Int()).UTC()
		return t.Format(time.RFC3339Nano)
	case "google.protobuf.Duration":
		fields := m.Descriptor().Fields()
		d := time.Duration(m.Get(fields.ByName("seconds")).Int())*time.Second + time.Duration(m.Get(fields.ByName("nanos")).Int())
		return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
	}
	var obj jsonObject
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.HasPresence() && fd.Message() == nil && !m.Has(fd) {
			// A proto3 optional or oneof scalar that is not set: absent, not its zero value.
			continue
		}
		name := fd.JSONName()
		switch {
		case fd.IsList():
			list := m.Get(fd).List()
			out := make([]any, list.Len())
			for j := range list.Len() {
				out[j] = jsonValue(fd, list.Get(j))
			}
			obj = append(obj, jsonMember{name, out})
		case fd.IsMap():
			obj = append(obj, jsonMember{name, jsonMap(fd, m.Get(fd).Map())})
		case fd.Kind() == protoreflect.BytesKind:
			b := m.Get(fd).Bytes()
			switch {
			case len(b) == 0:
				obj = append(obj, jsonMember{name, nil})
			case utf8.Valid(b) && json.Valid(b):
				obj = append(obj, jsonMember{name, json.RawMessage(compactJSON(b))})
			default:
				obj = append(obj, jsonMember{name, nil}, jsonMember{name + "Base64", base64.StdEncoding.EncodeToString(b)})
			}
		case fd.Message() != nil && !m.Has(fd):
			obj = append(obj, jsonMember{name, nil})
		default:
			obj = append(obj, jsonMember{name, jsonValue(fd, m.Get(fd))})
		}
	}
	if obj == nil {
		obj = jsonObject{}
	}
	return obj
}

// jsonValue converts one singular value of field fd.
func jsonValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return jsonMessage(v.Message())
	case protoreflect.EnumKind:
		return jsonEnum(fd.Enum(), v.Enum())
	case protoreflect.BoolKind:
		return v.Bool()
	case protoreflect.StringKind:
		return v.String()
	case protoreflect.BytesKind:
		return base64.StdEncoding.EncodeToString(v.Bytes())
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return strconv.FormatFloat(f, 'g', -1, 64)
		}
		return f
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return v.Uint()
	default:
		return v.Int()
	}
}

// jsonEnum is an enum value's short lowercase name, null for the zero value, or the number
// for a value this build does not know.
func jsonEnum(ed protoreflect.EnumDescriptor, n protoreflect.EnumNumber) any {
	if n == 0 {
		return nil
	}
	v := ed.Values().ByNumber(n)
	if v == nil {
		return int32(n)
	}
	prefix := strings.TrimSuffix(string(ed.Values().ByNumber(0).Name()), "UNSPECIFIED")
	return strings.ToLower(strings.TrimPrefix(string(v.Name()), prefix))
}

// jsonMap converts a map field with its keys in order; keys that name job states (the broker
// writes "PENDING") are lowercased like the state enum.
func jsonMap(fd protoreflect.FieldDescriptor, m protoreflect.Map) jsonObject {
	states := fd.Name() == "depth_by_state"
	vals := map[string]protoreflect.Value{}
	m.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		key := k.String()
		if states {
			key = strings.ToLower(strings.TrimPrefix(strings.ToUpper(key), "JOB_STATE_"))
		}
		vals[key] = v
		return true
	})
	obj := jsonObject{}
	for _, k := range sortedKeys(vals) {
		obj = append(obj, jsonMember{k, jsonValue(fd.MapValue(), vals[k])})
	}
	return obj
}

// compactJSON removes insignificant space from a valid JSON document, so an indented payload
// does not break the indentation of the output around it.
func compactJSON(b []byte) []byte {
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return b
	}
	return out.Bytes()
}
