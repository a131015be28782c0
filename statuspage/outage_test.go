package statuspage

import (
	"strings"
	"testing"
)

// TestOverviewWhenTheDatabaseCannotBeRead: with the store gone, the page
// says what it could not read rather than showing reassuring values: the
// incomplete-slots card read "0 among the 0 latest ledger rows", and the
// servers and checks tables "No server is registered." under their errors
// (found by an SRE's trial).
func TestOverviewWhenTheDatabaseCannotBeRead(t *testing.T) {
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			st := s.open(t)
			f := newFixture(t, st)
			srv := f.serve(t, &Opts{CacheFor: -1})
			st.Close()
			_, _, body := get(t, srv, "/")
			card := body[strings.Index(body, `<div class="label">Incomplete slots</div>`):]
			card = card[:strings.Index(card, "</section>")]
			wantText(t, "incomplete-slots card", text(card), "Incomplete slots ? the slot ledger could not be read")
			page := text(body)
			wantText(t, "page", page, "Servers unavailable.", "Could not read the check catalog")
			// The check this server found due and does not run is listed,
			// without a claim about the catalog it could not read.
			wantText(t, "mystery's row", text(row(t, body, `data-check="mystery"`)), "mystery ? — ?")
			for _, calm := range []string{"among the 0 latest ledger rows", "No server is registered.", "No check is registered",
				"No server has registered it", "no server"} {
				if strings.Contains(page, calm) {
					t.Errorf("the page says %q with the database unreadable:\n%s", calm, page)
				}
			}
		})
	}
}
