package slots

import (
	"fmt"
	"reflect"
	"testing"
)

func TestAssignEvenAndComplete(t *testing.T) {
	for _, tc := range []struct{ servers, n int }{{1, 4}, {3, 4}, {3, 12}, {4, 96}, {5, 7}, {7, 3}} {
		var servers []string
		for i := range tc.servers {
			servers = append(servers, fmt.Sprintf("server-%d", i))
		}
		o := Assign(servers, tc.n)
		if err := o.Validate(tc.n); err != nil {
			t.Fatalf("%d servers, %d positions: %v", tc.servers, tc.n, err)
		}
		if r := o.Check(tc.n); len(r.Overlaps) > 0 {
			t.Fatalf("%d servers, %d positions: overlaps %v", tc.servers, tc.n, r.Overlaps)
		}
		lo, hi := tc.n, 0
		for _, s := range servers {
			lo, hi = min(lo, len(o[s])), max(hi, len(o[s]))
		}
		if hi-lo > 1 {
			t.Errorf("%d servers, %d positions: loads range %d..%d, want within one: %v", tc.servers, tc.n, lo, hi, o)
		}
	}
}

func TestAssignDeterministic(t *testing.T) {
	a := Assign([]string{"a", "b", "c"}, 12)
	b := Assign([]string{"c", "a", "b", "a"}, 12)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same set, different assignment:\n%v\n%v", a, b)
	}
}

// moved counts positions whose owner differs between two assignments.
func moved(a, b Ownership, n int) int {
	owner := func(o Ownership, p int) string {
		for s, ps := range o {
			for _, q := range ps {
				if q == p {
					return s
				}
			}
		}
		return ""
	}
	m := 0
	for p := range n {
		if owner(a, p) != owner(b, p) {
			m++
		}
	}
	return m
}

func TestAssignMovesLittle(t *testing.T) {
	const n = 60
	three := Assign([]string{"a", "b", "c"}, n)
	two := Assign([]string{"a", "b"}, n)
	// c's 20 positions must move; a perfect assignment moves nothing else.
	// Allow a little churn from the capacity caps, far below a reshuffle.
	if m := moved(three, two, n); m < len(three["c"]) || m > len(three["c"])+n/10 {
		t.Errorf("c leaving moved %d positions; it owned %d", m, len(three["c"]))
	}
	four := Assign([]string{"a", "b", "c", "d"}, n)
	if m := moved(three, four, n); m < len(four["d"]) || m > len(four["d"])+n/10 {
		t.Errorf("d joining moved %d positions; it took %d", m, len(four["d"]))
	}
}

// AssignPositions gives out exactly the positions asked, evenly, and ranks
// each by its own number: a position assigned among 96 and among a subset
// of them goes to the same server as long as that server is not full, so
// that a static server joining or leaving beside automatic ones moves few
// of their positions (review: assigning by index in the subset reshuffled
// nearly all of them).
func TestAssignPositionsSubset(t *testing.T) {
	servers := []string{"a-1", "a-2", "a-3"}
	var free []int
	for p := range 96 {
		if p%4 != 0 { // a static server fires every fourth position
			free = append(free, p)
		}
	}
	o := AssignPositions(servers, free)
	seen := map[int]bool{}
	lo, hi := len(free), 0
	for _, s := range servers {
		lo, hi = min(lo, len(o[s])), max(hi, len(o[s]))
		for _, p := range o[s] {
			if seen[p] || p%4 == 0 {
				t.Fatalf("position %d given twice or not asked for: %v", p, o)
			}
			seen[p] = true
		}
	}
	if len(seen) != len(free) || hi-lo > 1 {
		t.Fatalf("%d of %d positions given, loads %d..%d: %v", len(seen), len(free), lo, hi, o)
	}
	if !reflect.DeepEqual(Assign(servers, 96), AssignPositions(servers, seq(96))) {
		t.Error("AssignPositions over 0..n-1 differs from Assign")
	}
	// Against the whole grid, the positions the static server leaves move
	// little: at most about the quarter it took.
	all := Assign(servers, 96)
	owner := map[int]string{}
	for s, ps := range all {
		for _, p := range ps {
			owner[p] = s
		}
	}
	movedN := 0
	for s, ps := range o {
		for _, p := range ps {
			if owner[p] != s {
				movedN++
			}
		}
	}
	if movedN > len(free)/3 {
		t.Errorf("%d of %d positions moved when a static server took a quarter, want few", movedN, len(free))
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
