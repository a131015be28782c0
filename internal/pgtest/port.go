package pgtest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// lowestPort is the lowest port FreePort hands out: above the ports
// services commonly listen on.
const lowestPort = 10000

// ports is what FreePort handed out, and how it picks the next port.
var ports struct {
	sync.Mutex
	below  int // the first port of the kernel's ephemeral range
	handed map[int]bool
	// held are the lock files of the ports handed out, kept open (locked)
	// while the process lives.
	held []*os.File
	// pick returns a number in [0, n): rand.IntN, or a test's sequence.
	pick func(n int) int
}

// reserve takes port p for this process among the test processes that go
// test runs at once: an exclusive lock on a file named after it, which the
// kernel releases when the process ends. It reports false when another
// process holds it.
func reserve(p int) bool {
	dir := filepath.Join(os.TempDir(), "prescient-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return true // no lock files: the listen check alone, as before
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	ports.held = append(ports.held, f)
	return true
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
// so. Each port is drawn at random, never one this process tried before,
// and reserved among the test processes go test runs at once by a lock on
// a file named after it (held while the process lives): checked free
// alone, a port one process was about to listen on was found free by
// another (two CI runs failed so). One in use, or reserved, is passed over.
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
		ports.handed[p] = true // tried: not drawn again, free or not
		if !reserve(p) {
			continue // another test process's
		}
		if probe(p) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free port on 127.0.0.1 in %d-%d", lowestPort, ports.below-1)
}

// probe reports whether a server can listen on 127.0.0.1:p: whether a
// socket can be bound there with SO_REUSEADDR, as servers bind (Go's,
// PostgreSQL's, PgBouncer's), which fails while anything listens on the
// port. It binds without listening: a child that another goroutine forks
// (to exec initdb, pg_ctl, ...) holds a copy of every descriptor until its
// exec, and a listening socket copied so kept the port in use after the
// probe closed it (the caller's listen then failed, about 1 in 100 probes
// with two goroutines running commands); a socket that is only bound does
// not stop a server's listen.
func probe(p int) bool {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer syscall.Close(fd)
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		return false
	}
	return syscall.Bind(fd, &syscall.SockaddrInet4{Port: p, Addr: [4]byte{127, 0, 0, 1}}) == nil
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
