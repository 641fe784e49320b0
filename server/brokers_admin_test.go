package server_test

import (
	"context"
	"os"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/store"
)

// listBrokers asks b for the brokers of its database.
func listBrokers(t *testing.T, b *brokertest.Bundle) []*jobwirev1.BrokerEntry {
	t.Helper()
	resp, err := b.Admin.ListBrokers(context.Background(), &jobwirev1.ListBrokersRequest{})
	if err != nil {
		t.Fatalf("ListBrokers: %v", err)
	}
	return resp.GetBrokers()
}

// leaders names the brokers a listing says lead.
func leaders(list []*jobwirev1.BrokerEntry) []string {
	var ids []string
	for _, e := range list {
		if e.GetLeader() {
			ids = append(ids, e.GetId())
		}
	}
	return ids
}

// Two brokers on one PostgreSQL database list each other, exactly one as leader, each marking
// itself as the one that answered; when the leader stops, the other takes over, and the listing
// says so and shows the stopped one as no longer alive.
func TestListBrokersShowsTheClusterAndItsLeader(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	aID, bID := brokerID(t, a), brokerID(t, b)
	host, _ := os.Hostname()
	for _, c := range []struct {
		via  *brokertest.Bundle
		self string
	}{{a, aID}, {b, bID}} {
		list := listBrokers(t, c.via)
		if len(list) != 2 || list[0].GetId() != aID || list[1].GetId() != bID {
			t.Fatalf("via broker %s: brokers %v, want %s then %s", c.self, list, aID, bID)
		}
		if got := leaders(list); len(got) != 1 || got[0] != aID {
			t.Fatalf("via broker %s: leaders %v, want only %s", c.self, got, aID)
		}
		for _, e := range list {
			if !e.GetAlive() || e.GetPid() != int32(os.Getpid()) || e.GetHost() != host ||
				e.GetStartedAt() == nil || e.GetLastSeen() == nil {
				t.Errorf("via broker %s: entry %v: want alive, this pid and host, times set", c.self, e)
			}
			if e.GetAnswering() != (e.GetId() == c.self) {
				t.Errorf("via broker %s: entry %s says answering=%v", c.self, e.GetId(), e.GetAnswering())
			}
		}
	}

	a.Stop()
	b.WaitLeader()
	var list []*jobwirev1.BrokerEntry
	brokertest.WaitFor(t, "only b to lead, the first broker listed not alive", func() bool {
		list = listBrokers(t, b)
		got := leaders(list)
		return len(got) == 1 && got[0] == bID && !list[0].GetAlive()
	})
	if len(list) != 2 || !list[1].GetAlive() || !list[1].GetAnswering() {
		t.Fatalf("after the leader stopped: %v", list)
	}
}

// brokerID is b's id in its cluster.
func brokerID(t *testing.T, b *brokertest.Bundle) string {
	t.Helper()
	c, ok := b.Store.(store.Cluster)
	if !ok {
		t.Fatal("the broker is not in a cluster")
	}
	return c.BrokerID()
}

// On SQLite (or any broker without a cluster) the broker is alone: it lists itself, the leader, with no broker id.
func TestListBrokersOnSQLiteIsTheOneBroker(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	list := listBrokers(t, b)
	if len(list) != 1 {
		t.Fatalf("brokers %v, want one", list)
	}
	e := list[0]
	if e.GetId() != "" || !e.GetLeader() || !e.GetAlive() || !e.GetAnswering() || e.GetPid() != int32(os.Getpid()) ||
		e.GetStartedAt() == nil || e.GetLastSeen() == nil {
		t.Fatalf("the one broker: %v", e)
	}
}

// ListBrokers is a read: a viewer may list the brokers, a producer or worker token may not.
func TestListBrokersNeedsAReadRole(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{RequireAuth: true})
	for _, tt := range []struct {
		role auth.Role
		code codes.Code
	}{
		{auth.RoleViewer, codes.OK},
		{auth.RoleAdmin, codes.OK},
		{auth.RoleProducer, codes.PermissionDenied},
		{auth.RoleWorker, codes.PermissionDenied},
	} {
		admin := jobwirev1.NewAdminServiceClient(b.DialToken(b.Token(tt.role, auth.Scope{})))
		_, err := admin.ListBrokers(context.Background(), &jobwirev1.ListBrokersRequest{})
		if status.Code(err) != tt.code {
			t.Errorf("%s token: %v, want %s", tt.role, err, tt.code)
		}
	}
}
