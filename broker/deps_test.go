package broker

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func node(key string, parents ...string) GraphNode {
	return GraphNode{Key: key, Spec: JobSpec{Type: "t"}, DependsOn: parents}
}

// orderGraph puts every parent before its dependents, keeping the request's order among nodes
// that are ready at once, and names the node that makes a graph impossible.
func TestOrderGraph(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		nodes []GraphNode
		order []int
		err   string
	}{
		{"already ordered", []GraphNode{node("a"), node("b", "a"), node("c", "b")}, []int{0, 1, 2}, ""},
		{"dependents first", []GraphNode{node("c", "a", "b"), node("b", "a"), node("a")}, []int{2, 1, 0}, ""},
		{"independent keep their order", []GraphNode{node("x"), node("y"), node("z", "x")}, []int{0, 1, 2}, ""},
		{"diamond", []GraphNode{node("d", "b", "c"), node("b", "a"), node("c", "a"), node("a")}, []int{3, 1, 2, 0}, ""},
		{"cycle", []GraphNode{node("a"), node("b", "a", "c"), node("c", "b")}, nil, `node "b": is on a cycle`},
		{"self", []GraphNode{node("a", "a")}, nil, `node "a": depends on itself`},
		{"unknown", []GraphNode{node("a", "q")}, nil, `node "a": depends on "q", which is no node`},
		{"twice", []GraphNode{node("a"), node("b", "a", "a")}, nil, `node "b": names "a" twice`},
		{"duplicate key", []GraphNode{node("a"), node("a")}, nil, `node "a": the key is used by two nodes`},
	} {
		order, _, err := orderGraph(c.nodes)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, ErrBadGraph) {
				t.Errorf("%s: %v, want ErrBadGraph containing %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(order, c.order) {
			t.Errorf("%s: order %v, %v; want %v", c.name, order, err, c.order)
		}
	}
}
