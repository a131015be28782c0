package slots

import (
	"hash/fnv"
	"slices"
	"sort"
)

// Assign spreads n positions over servers for automatic ownership. It is
// deterministic (the order of servers does not matter, only the set), even
// (every server gets n/len(servers) positions, rounded down or up), and
// stable: each position goes to the server that ranks it highest by
// rendezvous hashing among those not yet full, so when a server joins or
// leaves mostly the positions it gains or loses move.
//
// It returns, per server, its positions in ascending order. With no servers
// it returns an empty map.
func Assign(servers []string, n int) Ownership {
	positions := make([]int, max(n, 0))
	for p := range positions {
		positions[p] = p
	}
	return AssignPositions(servers, positions)
}

// AssignPositions is Assign over the given positions only (those no other
// server fires, say): each position still ranks the servers by its own
// number, so a position keeps its server when others join or leave the set.
func AssignPositions(servers []string, positions []int) Ownership {
	servers = slices.Clone(servers)
	sort.Strings(servers)
	servers = slices.Compact(servers)
	out := make(Ownership, len(servers))
	n := len(positions)
	if len(servers) == 0 || n == 0 {
		return out
	}
	// The first n%len servers in rank order may take one position more.
	base, extra := n/len(servers), n%len(servers)
	load := make(map[string]int, len(servers))
	full := func(s string, bigger int) bool {
		if load[s] < base {
			return false
		}
		return load[s] > base || bigger >= extra
	}
	bigger := 0 // servers that already took base+1
	// Place positions in the order of how strongly their favourite server
	// wants them, so that a capacity cap displaces the weakest preferences.
	type pref struct {
		pos   int
		ranks []string
		top   uint64
	}
	prefs := make([]pref, n)
	for i, p := range positions {
		ranks := slices.Clone(servers)
		score := make(map[string]uint64, len(ranks))
		for _, s := range ranks {
			score[s] = weight(s, p)
		}
		sort.Slice(ranks, func(i, j int) bool {
			if score[ranks[i]] != score[ranks[j]] {
				return score[ranks[i]] > score[ranks[j]]
			}
			return ranks[i] < ranks[j]
		})
		prefs[i] = pref{p, ranks, score[ranks[0]]}
	}
	sort.SliceStable(prefs, func(i, j int) bool { return prefs[i].top > prefs[j].top })
	for _, pr := range prefs {
		for _, s := range pr.ranks {
			if full(s, bigger) {
				continue
			}
			load[s]++
			if load[s] == base+1 {
				bigger++
			}
			out[s] = append(out[s], pr.pos)
			break
		}
	}
	for s := range out {
		slices.Sort(out[s])
	}
	return out
}

// weight is the rendezvous hash of a server and a position.
func weight(server string, p int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(server))
	h.Write([]byte{0, byte(p), byte(p >> 8), byte(p >> 16), byte(p >> 24)})
	x := h.Sum64()
	// fnv's low bits mix poorly for short inputs; finish with splitmix64.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
