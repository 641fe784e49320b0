package server_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

func TestTokenService(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{RequireAuth: true})
	ctx := context.Background()
	tokens := jobwirev1.NewTokenServiceClient(b.Conn)

	res, err := tokens.CreateToken(ctx, &jobwirev1.CreateTokenRequest{Role: jobwirev1.TokenRole_TOKEN_ROLE_PRODUCER,
		Queues: []string{"mail"}, Types: []string{"email.*"}, Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	info := res.GetInfo()
	if !strings.HasPrefix(res.GetToken(), "jw_"+info.GetId()+"_") || info.GetName() != "web" || info.GetRevokedAt() != nil {
		t.Fatalf("CreateToken = %v", res)
	}
	p := jobwirev1.NewProducerServiceClient(b.DialToken(res.GetToken()))
	if _, err := p.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "email.send", Queue: "mail"}}); err != nil {
		t.Fatalf("enqueue with the new token: %v", err)
	}

	list, err := tokens.ListTokens(ctx, &jobwirev1.ListTokensRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// The bundle's admin token, then the new one; no secret anywhere in the listing.
	if n := len(list.GetTokens()); n != 2 || list.GetTokens()[1].GetId() != info.GetId() {
		t.Fatalf("ListTokens = %v", list)
	}
	if secret := res.GetToken()[len("jw_"+info.GetId()+"_"):]; strings.Contains(list.String(), secret) {
		t.Fatal("ListTokens shows a token's secret")
	}

	revoked, err := tokens.RevokeToken(ctx, &jobwirev1.RevokeTokenRequest{Id: info.GetId()})
	if err != nil || revoked.GetInfo().GetRevokedAt() == nil {
		t.Fatalf("RevokeToken = %v, %v", revoked, err)
	}
	if _, err := p.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "email.send", Queue: "mail"}}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("enqueue right after revoke: %v, want UNAUTHENTICATED", err)
	}

	for name, c := range map[string]struct {
		req  *jobwirev1.CreateTokenRequest
		want string
	}{
		"no role":       {&jobwirev1.CreateTokenRequest{}, "role"},
		"scoped admin":  {&jobwirev1.CreateTokenRequest{Role: jobwirev1.TokenRole_TOKEN_ROLE_ADMIN, Queues: []string{"q"}}, "only to producer and worker"},
		"empty pattern": {&jobwirev1.CreateTokenRequest{Role: jobwirev1.TokenRole_TOKEN_ROLE_WORKER, Types: []string{""}}, "types"},
	} {
		_, err := tokens.CreateToken(ctx, c.req)
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), c.want) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT naming %q", name, err, c.want)
		}
	}
	if _, err := tokens.RevokeToken(ctx, &jobwirev1.RevokeTokenRequest{Id: "0000000000000000"}); status.Code(err) != codes.NotFound {
		t.Errorf("revoke an unknown id: %v, want NOT_FOUND", err)
	}
}
