package main

import (
	"context"
	"fmt"
	"strings"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/auth"
)

// listFlag collects names given comma-separated, repeated, or both.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*l = append(*l, part)
		}
	}
	return nil
}

func tokenService(b *broker) jobwirev1.TokenServiceClient {
	return jobwirev1.NewTokenServiceClient(b.c.Conn())
}

// runTokensCreate prints the new token alone on stdout, so that TOKEN=$(jobwire tokens create
// ...) captures it, and what it may do on stderr.
func runTokensCreate(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	var queues, types listFlag
	role := fs.String("role", "", "producer, worker, viewer or admin (required)")
	fs.Var(&queues, "queues", "queue patterns a producer or worker token is limited to, comma-separated; '*' matches any run of characters (default: any)")
	fs.Var(&types, "types", "job type patterns a producer or worker token is limited to, e.g. email.* (default: any)")
	name := fs.String("name", "", "a label for people, shown by tokens list")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos); err != nil {
		return err
	}
	if *role == "" {
		return usageErrorf("--role is required: producer, worker, viewer or admin")
	}
	r, err := auth.ParseRole(*role)
	if err != nil {
		return usageErrorf("--role: %v", err)
	}
	p := auth.CreateParams{Name: *name, Role: r, Scope: auth.Scope{Queues: queues, Types: types}}
	if err := p.Validate(); err != nil {
		return usageErrorf("%v", err)
	}
	resp, err := fetch(ctx, cf, func(ctx context.Context, b *broker) (*jobwirev1.CreateTokenResponse, error) {
		return tokenService(b).CreateToken(ctx, &jobwirev1.CreateTokenRequest{Role: jobwirev1.TokenRole(jobwirev1.TokenRole_value["TOKEN_ROLE_"+strings.ToUpper(r.String())]), Queues: queues, Types: types, Name: *name})
	})
	if err != nil {
		return err
	}
	if cf.json {
		return printJSON(e.stdout, resp)
	}
	fmt.Fprintln(e.stdout, display(resp.GetToken()))
	fmt.Fprintf(e.stderr, "created %s token %s (%s); it is shown only now: store it in a secret manager\n",
		r, display(resp.GetInfo().GetId()), tokenScope(resp.GetInfo()))
	return nil
}

func tokenScope(t *jobwirev1.TokenInfo) string {
	return display(auth.Scope{Queues: t.GetQueues(), Types: t.GetTypes()}.String())
}

func runTokensList(ctx context.Context, e *env, c *command, args []string) error {
	cf, err := parseCommonOnly(e, c, args)
	if err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.ListTokensResponse, error) {
		return tokenService(b).ListTokens(ctx, &jobwirev1.ListTokensRequest{})
	}, func(resp *jobwirev1.ListTokensResponse) error {
		tw := newTable(e.stdout)
		row(tw, "ID", "ROLE", "NAME", "QUEUES", "TYPES", "CREATED", "REVOKED")
		for _, t := range resp.GetTokens() {
			row(tw, t.GetId(), strings.ToLower(enumName(t.GetRole())), orDash(t.GetName()),
				orAny(t.GetQueues()), orAny(t.GetTypes()), fmtTime(t.GetCreatedAt()), fmtTime(t.GetRevokedAt()))
		}
		return tw.Flush()
	})
}

func orAny(patterns []string) string {
	if len(patterns) == 0 {
		return "any"
	}
	return strings.Join(patterns, ",")
}

func runTokensRevoke(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos, "token id"); err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.RevokeTokenResponse, error) {
		return tokenService(b).RevokeToken(ctx, &jobwirev1.RevokeTokenRequest{Id: pos[0]})
	}, func(resp *jobwirev1.RevokeTokenResponse) error {
		fmt.Fprintf(e.stdout, "token %s revoked at %s; calls presenting it are refused and its worker streams closed\n",
			display(resp.GetInfo().GetId()), fmtTime(resp.GetInfo().GetRevokedAt()))
		return nil
	})
}
