package pgtest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// lowestPort is the lowest port FreePort hands out: above the ports
// services commonly listen on.
const lowestPort = 10000

// ports is what FreePort handed out, and how it picks the next port.
var ports struct {
	sync.Mutex
	below  int // the first port of the kernel's ephemeral range
	handed map[int]bool
	// pick returns a number in [0, n): rand.IntN, or a test's sequence.
	pick func(n int) int
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on, for a
// server a test is about to start there.
//
// It is taken below the kernel's ephemeral range (ip_local_port_range,
// 32768-60999 by default), not by listening on port 0: a port the kernel
// hands out for port 0 is one it can hand out again between the check here
// and the server's listen, to another test's listener or to any outgoing
// connection (every test's connections to PostgreSQL take one), and the
// server then fails to start. A port below that range is never handed out
// so. Each port is drawn at random, never one this process handed out
// before, so that the test processes go test runs at once rarely try the
// same one: taken in turn from a random start, two processes whose starts
// were close walked the same ports, and one's check found free a port the
// other was about to listen on (a CI run failed so). One in use is passed
// over.
func FreePort() (int, error) {
	ports.Lock()
	defer ports.Unlock()
	if ports.below == 0 {
		ports.below = ephemeralStart()
		ports.handed = make(map[int]bool)
	}
	pick := ports.pick
	if pick == nil {
		pick = rand.IntN
	}
	n := ports.below - lowestPort
	for range 4 * n {
		p := lowestPort + pick(n)
		if ports.handed[p] {
			continue
		}
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			l.Close()
			ports.handed[p] = true
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free port on 127.0.0.1 in %d-%d", lowestPort, ports.below-1)
}

// ephemeralStart returns the first port of the kernel's ephemeral range,
// 32768 where it cannot be read (or makes no room below it).
func ephemeralStart() int {
	const fallback = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return fallback
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return fallback
	}
	p, err := strconv.Atoi(f[0])
	if err != nil || p <= lowestPort+1000 {
		return fallback
	}
	return p
}
