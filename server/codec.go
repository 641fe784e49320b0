package server

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/protocodec"
	"github.com/jobwire/jobwire/internal/stages"
)

// A request that fails to decode (invalid UTF-8 in a string field, bytes that are not a
// protobuf message) is the caller's mistake, yet grpc-go reports every decoding failure as
// INTERNAL, before any interceptor or handler runs. The codec below decodes as usual; on a
// failure it notes the message as bad instead of failing, and the first interceptor of each
// kind (utf8Unary, utf8Stream) answers INVALID_ARGUMENT before the message is used.

// badMessages holds the messages that failed to decode, until an interceptor takes them.
var badMessages sync.Map // message pointer -> error

type utf8Codec struct{ encoding.CodecV2 }

func newUTF8Codec() utf8Codec { return utf8Codec{protocodec.Codec} }

func (c utf8Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if err := c.CodecV2.Unmarshal(data, v); err != nil {
		badMessages.Store(v, err)
	}
	if _, ok := v.(*jobwirev1.EnqueueRequest); ok {
		stages.Mark(stages.Decoded)
	}
	return nil
}

// takeBadUTF8 returns INVALID_ARGUMENT if m failed to decode.
func takeBadUTF8(m any) error {
	v, bad := badMessages.LoadAndDelete(m)
	if !bad {
		return nil
	}
	err := v.(error)
	if strings.Contains(err.Error(), "invalid UTF-8") {
		return status.Error(codes.InvalidArgument, "request: a string field holds invalid UTF-8; strings must be valid UTF-8")
	}
	return status.Error(codes.InvalidArgument, fmt.Sprintf("request: cannot be decoded: %v", err))
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
