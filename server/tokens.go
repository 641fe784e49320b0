package server

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/auth"
)

type tokens struct {
	*Server
	jobwirev1.UnimplementedTokenServiceServer
}

// roleToProto and roleFromProto pair a role with the enum value of the same name.
func roleToProto(r auth.Role) jobwirev1.TokenRole {
	return jobwirev1.TokenRole(jobwirev1.TokenRole_value["TOKEN_ROLE_"+strings.ToUpper(r.String())])
}

func roleFromProto(r jobwirev1.TokenRole) (auth.Role, bool) {
	role, err := auth.ParseRole(strings.TrimPrefix(r.String(), "TOKEN_ROLE_"))
	return role, err == nil
}

func tokenToProto(t auth.Token) *jobwirev1.TokenInfo {
	return &jobwirev1.TokenInfo{Id: t.ID, Name: t.Name, Role: roleToProto(t.Role), Queues: t.Scope.Queues,
		Types: t.Scope.Types, CreatedAt: ts(t.CreatedAt), RevokedAt: ts(t.RevokedAt)}
}

// authenticator is the broker's token keeper; a server built without one cannot manage tokens.
func (t *tokens) authenticator() (*auth.Authenticator, error) {
	if t.auth == nil {
		return nil, status.Error(codes.FailedPrecondition, "this broker keeps no tokens")
	}
	return t.auth, nil
}

func (t *tokens) CreateToken(ctx context.Context, req *jobwirev1.CreateTokenRequest) (*jobwirev1.CreateTokenResponse, error) {
	a, err := t.authenticator()
	if err != nil {
		return nil, err
	}
	role, ok := roleFromProto(req.GetRole())
	if !ok {
		return nil, invalid("role", "must be TOKEN_ROLE_PRODUCER, TOKEN_ROLE_WORKER, TOKEN_ROLE_VIEWER or TOKEN_ROLE_ADMIN, got %s", req.GetRole())
	}
	p := auth.CreateParams{Name: req.GetName(), Role: role, Scope: auth.Scope{Queues: req.GetQueues(), Types: req.GetTypes()}}
	if err := p.Validate(); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	token, rec, err := a.Create(ctx, p)
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.CreateTokenResponse{Token: token, Info: tokenToProto(rec)}, nil
}

func (t *tokens) ListTokens(ctx context.Context, _ *jobwirev1.ListTokensRequest) (*jobwirev1.ListTokensResponse, error) {
	a, err := t.authenticator()
	if err != nil {
		return nil, err
	}
	recs, err := a.List(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &jobwirev1.ListTokensResponse{Tokens: make([]*jobwirev1.TokenInfo, len(recs))}
	for i, r := range recs {
		out.Tokens[i] = tokenToProto(r)
	}
	return out, nil
}

func (t *tokens) RevokeToken(ctx context.Context, req *jobwirev1.RevokeTokenRequest) (*jobwirev1.RevokeTokenResponse, error) {
	a, err := t.authenticator()
	if err != nil {
		return nil, err
	}
	if req.GetId() == "" || len(req.GetId()) > maxNameLen {
		return nil, invalid("id", "must be a token id as tokens list shows it")
	}
	rec, err := a.Revoke(ctx, req.GetId())
	if errors.Is(err, auth.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "no token has id %q", req.GetId())
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.RevokeTokenResponse{Info: tokenToProto(rec)}, nil
}
