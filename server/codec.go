package server

import (
	"context"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the proto codec wrapped below
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// A request whose string field holds invalid UTF-8 fails to decode. grpc-go reports every
// decoding failure as INTERNAL, before any interceptor or handler runs, yet the caller sent a bad
// request: INVALID_ARGUMENT is the code that says so. The codec below decodes as usual; on
// invalid UTF-8 it notes the message as bad instead of failing, and the first interceptor of
// each kind (utf8Unary, utf8Stream) answers INVALID_ARGUMENT before the message is used.

// badUTF8 holds the messages decoded from invalid UTF-8, until an interceptor takes them.
var badUTF8 sync.Map // message pointer -> error

type utf8Codec struct{ encoding.CodecV2 }

func newUTF8Codec() utf8Codec { return utf8Codec{encoding.GetCodecV2("proto")} }

func (c utf8Codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err != nil && strings.Contains(err.Error(), "invalid UTF-8") {
		badUTF8.Store(v, err)
		return nil
	}
	return err
}

// takeBadUTF8 returns INVALID_ARGUMENT if m was decoded from invalid UTF-8.
func takeBadUTF8(m any) error {
	if _, bad := badUTF8.LoadAndDelete(m); bad {
		return status.Error(codes.InvalidArgument, "request: a string field holds invalid UTF-8; strings must be valid UTF-8")
	}
	return nil
}

func utf8Unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if err := takeBadUTF8(req); err != nil {
		return nil, err
	}
	return next(ctx, req)
}

func utf8Stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	return next(srv, utf8ServerStream{ss})
}

type utf8ServerStream struct{ grpc.ServerStream }

func (s utf8ServerStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return takeBadUTF8(m)
}
