// Package promtest scrapes a Prometheus endpoint over HTTP for tests and
// reads values out of what it served.
package promtest

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are the metric families of one scrape, by name.
type Families map[string]*dto.MetricFamily

// Scrape GETs url and parses the text exposition format it serves. It
// returns an error for a status other than 200 or a body that does not
// parse.
func Scrape(url string) (Families, error) {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		return nil, fmt.Errorf("GET %s: content type %q, want the text format", url, ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return fams, nil
}

// MustScrape is Scrape that fails the test on an error.
func MustScrape(t testing.TB, url string) Families {
	t.Helper()
	f, err := Scrape(url)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Value returns the value of the series of metric name whose labels include
// labels (name, value pairs): a counter's or gauge's value, a histogram's
// sample count. ok is false when there is no such series, or several.
func (f Families) Value(name string, labels ...string) (v float64, ok bool) {
	ms := f.series(name, labels)
	if len(ms) != 1 {
		return 0, false
	}
	m := ms[0]
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue(), true
	case m.Gauge != nil:
		return m.Gauge.GetValue(), true
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount()), true
	case m.Untyped != nil:
		return m.Untyped.GetValue(), true
	}
	return 0, false
}

// Sum returns the sum of a histogram series (see Value for labels).
func (f Families) Sum(name string, labels ...string) (v float64, ok bool) {
	ms := f.series(name, labels)
	if len(ms) != 1 || ms[0].Histogram == nil {
		return 0, false
	}
	return ms[0].Histogram.GetSampleSum(), true
}

// Total adds up the values (see Value) of every series of metric name
// whose labels include labels.
func (f Families) Total(name string, labels ...string) float64 {
	var sum float64
	for _, m := range f.series(name, labels) {
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum
}

// Labels returns, sorted, the values label takes in the series of metric
// name.
func (f Families) Labels(name, label string) []string {
	var out []string
	for _, m := range f.series(name, nil) {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				out = append(out, l.GetValue())
			}
		}
	}
	slices.Sort(out)
	return out
}

// Type returns the type of metric name, "" if it is absent.
func (f Families) Type(name string) string {
	fam, ok := f[name]
	if !ok {
		return ""
	}
	return strings.ToLower(fam.GetType().String())
}

func (f Families) series(name string, labels []string) []*dto.Metric {
	fam, ok := f[name]
	if !ok {
		return nil
	}
	var out []*dto.Metric
	for _, m := range fam.GetMetric() {
		if hasLabels(m, labels) {
			out = append(out, m)
		}
	}
	return out
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
