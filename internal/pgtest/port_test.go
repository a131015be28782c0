package pgtest

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortIsOutsideTheEphemeralRange: the ports FreePort hands out are
// distinct, free, and below the range the kernel takes ports from for
// outgoing connections and for listens on port 0, so none of those can take
// one before the test's server listens on it.
func TestFreePortIsOutsideTheEphemeralRange(t *testing.T) {
	t.Parallel()
	below := ephemeralStart()
	seen := map[int]bool{}
	for range 50 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if p < lowestPort || p >= below {
			t.Fatalf("FreePort: %d, not in [%d, %d)", p, lowestPort, below)
		}
		if seen[p] {
			t.Fatalf("FreePort handed out %d twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("listen on the port FreePort returned: %v", err)
		}
		l.Close()
	}
}

// TestFreePortPassesOverAPortInUse: a port something listens on is not
// handed out.
func TestFreePortPassesOverAPortInUse(t *testing.T) {
	// Not parallel: it sets where FreePort takes its next port from.
	p, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// The next draws: p (in use), then p again, then the port after it;
	// p forgotten as handed out, so that only its listener passes it over.
	draws := []int{p - lowestPort, p - lowestPort, p + 1 - lowestPort}
	ports.Lock()
	delete(ports.handed, p)
	ports.pick = func(n int) int {
		d := draws[0]
		if len(draws) > 1 {
			draws = draws[1:]
		}
		return d % n
	}
	ports.Unlock()
	defer func() {
		ports.Lock()
		ports.pick = nil
		ports.Unlock()
	}()
	q, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if q == p {
		t.Fatalf("FreePort handed out %d, which is in use", p)
	}
}
