package server

import (
	"context"

	"github.com/jobwire/jobwire/breaker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

type admin struct {
	*Server
	jobwirev1.UnimplementedAdminServiceServer
}

var breakerStateFromProto = map[jobwirev1.BreakerState]breaker.State{
	jobwirev1.BreakerState_BREAKER_STATE_CLOSED:    breaker.StateClosed,
	jobwirev1.BreakerState_BREAKER_STATE_OPEN:      breaker.StateOpen,
	jobwirev1.BreakerState_BREAKER_STATE_HALF_OPEN: breaker.StateHalfOpen,
}

func (a *admin) ListBreakers(context.Context, *jobwirev1.ListBreakersRequest) (*jobwirev1.ListBreakersResponse, error) {
	out := &jobwirev1.ListBreakersResponse{}
	infos, omitted := capList(a.b.Breakers())
	out.Omitted = omitted
	for _, i := range infos {
		out.Breakers = append(out.Breakers, breakerToProto(i))
	}
	return out, nil
}

func (a *admin) ResetBreaker(ctx context.Context, req *jobwirev1.ResetBreakerRequest) (*jobwirev1.ResetBreakerResponse, error) {
	info, err := a.b.ResetBreaker(ctx, req.GetType())
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.ResetBreakerResponse{Breaker: breakerToProto(info)}, nil
}

func (a *admin) ForceBreaker(ctx context.Context, req *jobwirev1.ForceBreakerRequest) (*jobwirev1.ForceBreakerResponse, error) {
	info, err := a.b.ForceBreaker(ctx, req.GetType(), breakerStateFromProto[req.GetState()])
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.ForceBreakerResponse{Breaker: breakerToProto(info)}, nil
}

// maxListed caps the entries of a listing that grows with use (queues, breakers, counts per
// queue and type), so that its response always fits in a message (docs/security.md, "Limits").
const maxListed = 1000

// capList keeps the first maxListed entries and says how many it left out.
func capList[T any](s []T) ([]T, int32) {
	if len(s) <= maxListed {
		return s, 0
	}
	return s[:maxListed], int32(len(s) - maxListed)
}
