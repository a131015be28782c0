package statuspage

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPackage is the Debian package the browser test runs.
const chromiumPackage = "chromium"

// chromium returns the path of a Chromium binary: Debian's package's, found
// on PATH, or installed with apt-get when the test runs as root. Without
// one the test fails, saying which package it needs: the page is only shown
// to work in a real browser.
func chromium(t *testing.T) string {
	t.Helper()
	find := func() string {
		for _, name := range []string{"chromium", "chromium-browser"} {
			if p, err := exec.LookPath(name); err == nil {
				return p
			}
		}
		return ""
	}
	if p := find(); p != "" {
		return p
	}
	if os.Geteuid() != 0 {
		t.Fatalf("the browser test needs a headless Chromium: install Debian's %q package (apt-get install -y %s) "+
			"and run it again; it installs the package itself only when it runs as root", chromiumPackage, chromiumPackage)
	}
	t.Logf("no Chromium on PATH: installing Debian's %q package with apt-get", chromiumPackage)
	install := func() ([]byte, error) {
		cmd := exec.Command("apt-get", "install", "-y", "--no-install-recommends", chromiumPackage)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.CombinedOutput()
	}
	out, err := install()
	if err != nil {
		// A fresh machine may have no package lists yet.
		if upd, uerr := exec.Command("apt-get", "update").CombinedOutput(); uerr != nil {
			t.Fatalf("the browser test needs Debian's %q package; apt-get update failed: %v\n%s", chromiumPackage, uerr, upd)
		}
		out, err = install()
	}
	if p := find(); err != nil || p == "" {
		t.Fatalf("the browser test needs Debian's %q package, and apt-get install -y %s failed: %v\n%s",
			chromiumPackage, chromiumPackage, err, out)
	}
	return find()
}

// browser starts a headless Chromium of the test's own, with a fresh
// profile, and returns the context of its first tab; chromedp.NewContext
// on it opens more tabs in the same browser. The flags keep it off the network:
// this machine has none beyond loopback, and without them Chromium stalls
// on refused connections (updates, sync, QUIC probes).
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1360, 900),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	tab, cancelTab := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancelTab)
	// Start the browser on the tab's own context: one started by a step's
	// context would end with that step.
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return tab
}

// newTab opens a tab of its own for t in the browser of first.
func newTab(t *testing.T, first context.Context) context.Context {
	t.Helper()
	tab, cancel := chromedp.NewContext(first)
	t.Cleanup(cancel)
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	return tab
}

// stepTimeout bounds each step of the browser test, so that a selector
// that never matches fails the test with the step's name.
const stepTimeout = 30 * time.Second

// TestInBrowser loads the status page of a client with real jobs in a real
// headless Chromium, on each store, and checks what a person sees: the
// upcoming slot with its jobs, the fired and the incomplete slots, the
// servers live and gone, the unknown check, history filtered by outcome
// through the form, and the job page that a history row links to, with the
// check's error and the payload shown as text. It saves screenshots.
func TestInBrowser(t *testing.T) {
	first := browser(t)
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			f := newFixture(t, st.open(t))
			srv := f.serve(t, &Opts{CacheFor: -1})
			tab := newTab(t, first)
			step := func() context.Context {
				ctx, cancel := context.WithTimeout(tab, stepTimeout)
				t.Cleanup(cancel)
				return ctx
			}
			do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
				t.Helper()
				if err := chromedp.Do(step(), steps...); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
			}
			str := func(what string, a chromedp.Action[string]) string {
				t.Helper()
				v, err := chromedp.Run(step(), a)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				return strings.Join(strings.Fields(v), " ")
			}
			eval := func(what, js string) string {
				t.Helper()
				return str(what, chromedp.Evaluate[string](js))
			}
			navigate := func(what string, a chromedp.Action[chromedp.Void]) {
				t.Helper()
				resp, err := chromedp.RunResponse(step(), a)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if resp.Status != http.StatusOK {
					t.Fatalf("%s: HTTP %d", what, resp.Status)
				}
			}

			// The overview (its reloading paused, so that it holds still).
			navigate("open the overview", chromedp.Navigate(srv.URL+"/?refresh=0"))
			do("the timeline", chromedp.WaitVisible(chromedp.ID("timeline")))
			row := func(slot time.Time) string {
				return str("slot "+clock(slot), chromedp.Text(chromedp.CSS(fmt.Sprintf(`tr[data-slot="%s"]`, iso(slot)))))
			}
			wantText(t, "upcoming slot 10:05", row(slot1005), "10:05:00", "upcoming", "9", "web-1", "in 2m30s")
			wantText(t, "fired slot 10:01", row(slot1001), "done", "5", "2s", "done 3", "again later 1", "failures 1", "unknown 1")
			wantText(t, "incomplete slot 09:58", row(slot0958), "incomplete", "web-2")
			if bg := eval("incomplete background", `getComputedStyle(document.querySelector('tr.incomplete td')).backgroundColor`); bg != "rgb(253, 233, 231)" {
				t.Errorf("the incomplete slot's background is %q, want the stylesheet's red tint rgb(253, 233, 231)", bg)
			}
			wantText(t, "server web-1", str("web-1", chromedp.Text(chromedp.CSS(`tr[data-server="web-1"]`))), "live", "this server", "0–3")
			wantText(t, "server web-2", str("web-2", chromedp.Text(chromedp.CSS(`tr[data-server="web-2"]`))), "gone")
			wantText(t, "unknown check", str("unknown", chromedp.Text(chromedp.CSS(`#unknown tr[data-check="mystery"]`))), "mystery", "3", "not in the catalog")
			wantText(t, "summary", str("summary", chromedp.Text(chromedp.ID("summary"))), "PENDING 12", "OVERDUE 1")
			// Everything the page loaded came from the server under test,
			// and the stylesheet applied.
			if res := eval("resources", `performance.getEntriesByType('resource').map(e => e.name).join(' ')`); !strings.Contains(res, srv.URL+"/static/style.css") {
				t.Errorf("the page did not load its stylesheet: resources %q", res)
			} else {
				for _, u := range strings.Fields(res) {
					if !strings.HasPrefix(u, srv.URL+"/") {
						t.Errorf("the page loaded %s, which is not the server under test", u)
					}
				}
			}
			if fontOK := eval("font", `getComputedStyle(document.body).fontFamily`); !strings.Contains(fontOK, "system-ui") {
				t.Errorf("the stylesheet did not apply: body font %q", fontOK)
			}
			shot(t, tab, st.name+"-overview", st.name == "postgres")

			// History, filtered by outcome through the form.
			navigate("open history", chromedp.Click(chromedp.CSS(`nav a[href$="history"]`)))
			do("choose failed", chromedp.SetValue(chromedp.ID("outcome"), "failed"))
			navigate("filter", chromedp.Click(chromedp.ID("filter")))
			if loc := str("location", chromedp.Location()); !strings.Contains(loc, "outcome=failed") {
				t.Errorf("the form went to %s, want a GET with outcome=failed", loc)
			}
			rows := eval("rows", `[...document.querySelectorAll('tr.record')].map(r => r.dataset.outcome + ' ' + r.dataset.key).join('|')`)
			if rows != "failed "+oddKey {
				t.Errorf("history filtered by outcome failed shows %q, want the one failed job %q", rows, "failed "+oddKey)
			}
			shot(t, tab, st.name+"-history", false)

			// The job page, from the row's link.
			navigate("open the job", chromedp.Click(chromedp.CSS(`tr.record td.mono a`)))
			do("the job page", chromedp.WaitVisible(chromedp.ID("job-history")))
			wantText(t, "job", str("ident", chromedp.Text(chromedp.ID("job-ident"))), "order · "+oddKey+" · flaky")
			wantText(t, "job", str("pending", chromedp.Text(chromedp.ID("not-pending"))), "This job is not pending.")
			if got := eval("error", `document.querySelector('#job-history pre.error').textContent`); got != strings.Join(strings.Fields(boom), " ") {
				t.Errorf("the job's last error reads %q, want the check's error as text %q", got, boom)
			}
			if got := eval("payload", `document.querySelector('#job-history pre.payload').textContent`); !strings.Contains(got, `"note": "<script>alert(1)</script>"`) {
				t.Errorf("the job's payload reads %q, want its JSON as text", got)
			}
			if n := eval("markup", `String(document.querySelectorAll('script, pre b, pre i, x').length)`); n != "0" {
				t.Errorf("%s elements of markup from the store made it into the page", n)
			}
			shot(t, tab, st.name+"-job", false)
		})
	}
}

// shot saves a full-page screenshot under os.TempDir and logs its path;
// keep also copies it to /tmp/prescient-statuspage.png.
func shot(t *testing.T, tab context.Context, name string, keep bool) {
	t.Helper()
	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	f, err := os.CreateTemp("", "prescient-statuspage-"+name+"-*.png")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(png); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the %s page: %s", name, f.Name())
	if keep {
		path := filepath.Join(os.TempDir(), "prescient-statuspage.png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("and a copy at %s", path)
	}
}
