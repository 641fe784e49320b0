package server

import (
	"context"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/auth"
)

// The audit trail: every call names its caller to the broker (actorUnary), which records each
// operator action with it; ListAuditEvents reads the trail back.

// Sources of a call, as the audit trail records them.
const (
	sourceAPI       = "api"
	sourceDashboard = "dashboard"
)

type inProcessKey struct{}

// actorUnary tells the broker who is calling: the token the call was authenticated with
// (anonymous when auth is off), the caller's address, and whether it came over the network or
// from the dashboard in process (LocalConn).
func (s *Server) actorUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	return next(broker.WithActor(ctx, actorOf(ctx)), req)
}

func actorOf(ctx context.Context) broker.Actor {
	a := broker.Actor{Name: broker.Anonymous, Source: sourceAPI}
	if p, ok := auth.PrincipalFrom(ctx); ok {
		a.TokenID, a.Name = p.TokenID, p.Name
	}
	if ctx.Value(inProcessKey{}) != nil {
		a.Source = sourceDashboard
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		a.Peer = p.Addr.String()
	}
	return a
}

// validAuditRequest checks a ListAuditEvents request.
func validAuditRequest(r *jobwirev1.ListAuditEventsRequest) error {
	if a := r.GetAction(); a != "" && !slices.Contains(broker.AuditActions, a) {
		return invalid("action", "must be one of %s, got %q", strings.Join(broker.AuditActions, ", "), a)
	}
	if n := len(r.GetActor()); n > maxNameLen {
		return invalid("actor", "must be at most %d characters, got %d", maxNameLen, n)
	}
	if t := r.GetSince(); t != nil {
		if err := t.CheckValid(); err != nil {
			return invalid("since", "is not a valid time: %v", err)
		}
	}
	if t := r.GetUntil(); t != nil {
		if err := t.CheckValid(); err != nil {
			return invalid("until", "is not a valid time: %v", err)
		}
	}
	if r.GetSince() != nil && r.GetUntil() != nil && !r.GetSince().AsTime().Before(r.GetUntil().AsTime()) {
		return invalid("until", "must be later than since")
	}
	if err := validPageSize(r.GetPageSize()); err != nil {
		return err
	}
	_, err := decodeJobToken(r.GetPageToken())
	return err
}

func (a *admin) ListAuditEvents(ctx context.Context, req *jobwirev1.ListAuditEventsRequest) (*jobwirev1.ListAuditEventsResponse, error) {
	before, err := decodeJobToken(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	size := pageSize(req.GetPageSize())
	p := broker.AuditFilter{Action: req.GetAction(), Actor: req.GetActor(), BeforeID: before, Limit: size + 1}
	if req.GetSince() != nil {
		p.Since = req.GetSince().AsTime()
	}
	if req.GetUntil() != nil {
		p.Until = req.GetUntil().AsTime()
	}
	evs, err := a.b.AuditEvents(ctx, p)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &jobwirev1.ListAuditEventsResponse{}
	if len(evs) > size {
		evs = evs[:size]
		out.NextPageToken = encodeJobToken(evs[size-1].ID)
	}
	out.Events = make([]*jobwirev1.AuditEvent, len(evs))
	for i, e := range evs {
		out.Events[i] = &jobwirev1.AuditEvent{Id: e.ID, Time: ts(e.At), Action: e.Action, ActorTokenId: e.ActorID,
			ActorName: e.ActorName, Source: e.Source, Peer: e.Peer, BrokerId: e.BrokerID, Target: e.Target,
			Detail: e.Detail, Count: e.Count, JobIds: e.JobIDs}
	}
	return out, nil
}
