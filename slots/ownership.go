package slots

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/prescient-dev/prescient/checks"
)

// Ownership is a static map from server name to the positions it fires. A nil
// or empty Ownership means that every server fires every position (the usual
// single-server setup).
type Ownership map[string][]int

// ErrUnowned is wrapped by the error Validate returns when a position has no
// owner: the jobs due in its slots would never fire.
var ErrUnowned = errors.New("position has no owner")

// Report is what Check finds in an ownership map.
type Report struct {
	// Unowned lists positions no server fires, ascending.
	Unowned []int
	// Overlaps maps a position fired by more than one server to those servers,
	// sorted. Overlaps are safe (row claims stop a job from running twice) but
	// usually a mistake, so they are reported.
	Overlaps map[int][]string
	// Invalid lists problems that make the map unusable: positions out of
	// range, repeated positions, server names no server can have.
	Invalid []string
}

// Check inspects the map against a cycle of n positions. An empty map is
// reported clean: every server owns everything.
func (o Ownership) Check(n int) Report {
	var r Report
	if len(o) == 0 {
		return r
	}
	owners := make(map[int][]string)
	for _, server := range o.Servers() {
		if err := checks.ValidateName("server", server); err != nil {
			// No server can be named so: its positions would never fire.
			r.Invalid = append(r.Invalid, err.Error())
		}
		seen := make(map[int]bool)
		for _, p := range o[server] {
			switch {
			case p < 0 || p >= n:
				r.Invalid = append(r.Invalid, fmt.Sprintf("server %q: position %d is outside 0..%d", server, p, n-1))
			case seen[p]:
				r.Invalid = append(r.Invalid, fmt.Sprintf("server %q: position %d is listed twice", server, p))
			default:
				owners[p] = append(owners[p], server)
			}
			seen[p] = true
		}
	}
	for p := 0; p < n; p++ {
		switch len(owners[p]) {
		case 0:
			r.Unowned = append(r.Unowned, p)
		case 1:
		default:
			if r.Overlaps == nil {
				r.Overlaps = make(map[int][]string)
			}
			r.Overlaps[p] = owners[p]
		}
	}
	return r
}

// Validate returns an error when the map cannot be used with a cycle of n
// positions: a position outside the cycle, or a position nobody owns.
// Overlaps are not errors; see Check.
func (o Ownership) Validate(n int) error {
	r := o.Check(n)
	if len(r.Invalid) > 0 {
		return errors.New(strings.Join(r.Invalid, "; "))
	}
	if len(r.Unowned) > 0 {
		return fmt.Errorf("%w: position(s) %s of 0..%d are fired by no server, so their jobs would never run", ErrUnowned, positionsText(r.Unowned), n-1)
	}
	return nil
}

// positionsText writes sorted positions for an error: runs of three or more
// as first-last, at most 20 items, then how many there are in all.
func positionsText(ps []int) string {
	const most = 20
	var items []string
	for i := 0; i < len(ps); {
		j := i
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		if len(items) >= most {
			return "[" + strings.Join(items, " ") + fmt.Sprintf(" ...] (%d in all)", len(ps))
		}
		switch {
		case j-i >= 2:
			items = append(items, fmt.Sprintf("%d-%d", ps[i], ps[j]))
		case j > i:
			items = append(items, fmt.Sprint(ps[i]), fmt.Sprint(ps[j]))
		default:
			items = append(items, fmt.Sprint(ps[i]))
		}
		i = j + 1
	}
	return "[" + strings.Join(items, " ") + "]"
}

// Owns reports whether server fires position p. With an empty map every
// server owns every position.
func (o Ownership) Owns(server string, p int) bool {
	if len(o) == 0 {
		return true
	}
	return slices.Contains(o[server], p)
}

// Owners returns the servers that fire position p, sorted.
func (o Ownership) Owners(p int) []string {
	var out []string
	for _, s := range o.Servers() {
		if slices.Contains(o[s], p) {
			out = append(out, s)
		}
	}
	return out
}

// Servers returns the server names in the map, sorted.
func (o Ownership) Servers() []string {
	out := make([]string, 0, len(o))
	for s := range o {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}
