package hatest

import (
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// installs remembers, per Debian package, what installing it came to: ""
// when it is there, else why the package manager said no.
var installs struct {
	mu   sync.Mutex
	done map[string]string
}

// requirePackage makes sure the Debian package pkg is installed, checking
// for its files; it installs it with apt-get when they are missing. The test
// is skipped, with a message naming the package, only when the package
// manager says no (no apt-get, not allowed, or no such package); an install
// that apt-get reports as done but that leaves the files missing fails the
// test.
func requirePackage(t testing.TB, pkg string, files ...string) {
	t.Helper()
	installs.mu.Lock()
	defer installs.mu.Unlock()
	if installs.done == nil {
		installs.done = map[string]string{}
	}
	missing := func() []string {
		var m []string
		for _, f := range files {
			if _, err := os.Stat(f); err != nil {
				m = append(m, f)
			}
		}
		return m
	}
	if len(missing()) == 0 {
		return
	}
	if why, tried := installs.done[pkg]; tried {
		if why != "" {
			t.Skip(why)
		}
		t.Fatalf("the Debian package %s is installed but %v are missing", pkg, missing())
	}
	why := aptInstall(t, pkg)
	installs.done[pkg] = why
	if why != "" {
		t.Skip(why)
	}
	if m := missing(); len(m) > 0 {
		t.Fatalf("apt-get installed %s, but %v are still missing", pkg, m)
	}
}

// aptInstall installs pkg with apt-get (refreshing the package lists and
// trying again if the first attempt fails) and returns "" on success, or the
// skip message naming the package and quoting the package manager.
func aptInstall(t testing.TB, pkg string) string {
	t.Helper()
	apt, err := exec.LookPath("apt-get")
	if err != nil {
		return "needs the Debian package " + pkg + ", which is not installed, and there is no apt-get to install it with: install " + pkg
	}
	install := func() ([]byte, error) {
		cmd := exec.Command(apt, "install", "-y", "-q", "--no-install-recommends", pkg)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.CombinedOutput()
	}
	t.Logf("installing the Debian package %s with apt-get", pkg)
	out, err := install()
	if err != nil {
		update := exec.Command(apt, "update", "-q")
		update.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if uout, uerr := update.CombinedOutput(); uerr != nil {
			out = append(out, uout...)
		} else {
			out, err = install()
		}
	}
	if err != nil {
		return "needs the Debian package " + pkg + ", and the package manager would not install it (apt-get install -y " + pkg + ": " +
			err.Error() + "): " + lastLines(string(out), 5)
	}
	return ""
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
