package auth

import (
	"fmt"
	"strings"
)

// Role is what a token may do. Every token has exactly one.
type Role int

const (
	// RoleUnspecified is no role; no token has it.
	RoleUnspecified Role = iota
	// RoleProducer may enqueue jobs, and read and cancel jobs, within its scope.
	RoleProducer
	// RoleWorker may open worker streams serving the queues and job types of its scope.
	RoleWorker
	// RoleViewer may call the read-only admin calls: listings, stats, jobs.
	RoleViewer
	// RoleAdmin may call everything, tokens included. Admin tokens have no scope.
	RoleAdmin
)

// Roles lists every role, in the order help texts name them.
var Roles = []Role{RoleProducer, RoleWorker, RoleViewer, RoleAdmin}

var roleNames = map[Role]string{RoleProducer: "producer", RoleWorker: "worker", RoleViewer: "viewer", RoleAdmin: "admin"}

func (r Role) String() string {
	if n, ok := roleNames[r]; ok {
		return n
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// ParseRole reads a role's name.
func ParseRole(s string) (Role, error) {
	for r, n := range roleNames {
		if strings.EqualFold(s, n) {
			return r, nil
		}
	}
	return RoleUnspecified, fmt.Errorf("unknown role %q; want producer, worker, viewer or admin", s)
}

// Scoped reports whether tokens of the role may carry queue and type scopes. Viewer and admin
// tokens see everything: a scope on them would suggest a protection the read and admin calls do
// not give.
func (r Role) Scoped() bool { return r == RoleProducer || r == RoleWorker }
