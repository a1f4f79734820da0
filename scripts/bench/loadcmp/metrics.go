package main

import (
	"context"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// engineTimes is what one scrape of Caddy's /metrics (its admin
// endpoint) says about where the rcns engine's time went: the sums
// (seconds) and counts of two histograms, over every label.
type engineTimes struct {
	// Request: caddy_rcns_request_duration_seconds, a request's time
	// in the engine from its arrival to its answer.
	RequestSeconds float64
	RequestCount   uint64
	// Store: caddy_rcns_store_round_trip_duration_seconds of the ops an
	// answer waits for (all but offAnswerPathOps).
	StoreSeconds float64
	StoreCount   uint64
}

// offAnswerPathOps are the store ops no answer waits for
// (docs/metrics.md, docs/cluster.md "Round trips per request kind"):
// the record writer's batches, a keyed answer's store or release made
// beside it (their duration holds the batch's gathering), a lease's
// renewal, and the node's own housekeeping.
var offAnswerPathOps = map[string]bool{
	"record": true, "idempotency_complete": true, "idempotency_abandon": true,
	"idempotency_renew": true, "ping": true, "count": true, "node_id": true, "seal_key": true, "manifest": true,
}

// scrapeEngine reads engineTimes from the Prometheus text at url.
func scrapeEngine(ctx context.Context, url string) (engineTimes, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return engineTimes{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return engineTimes{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return engineTimes{}, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return parseEngineTimes(resp.Body)
}

// parseEngineTimes sums the two histograms of engineTimes in a
// Prometheus text exposition; a histogram absent (no request yet) is 0.
func parseEngineTimes(r io.Reader) (engineTimes, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return engineTimes{}, err
	}
	var t engineTimes
	if f := fams["caddy_rcns_request_duration_seconds"]; f != nil {
		for _, m := range f.GetMetric() {
			t.RequestSeconds += m.GetHistogram().GetSampleSum()
			t.RequestCount += m.GetHistogram().GetSampleCount()
		}
	}
	if f := fams["caddy_rcns_store_round_trip_duration_seconds"]; f != nil {
		for _, m := range f.GetMetric() {
			if offAnswerPathOps[labelValue(m, "op")] {
				continue
			}
			t.StoreSeconds += m.GetHistogram().GetSampleSum()
			t.StoreCount += m.GetHistogram().GetSampleCount()
		}
	}
	return t, nil
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// perRequest sets st's engine fields from the scrapes a (before the
// run) and b (after it): the mean engine time and store wait per
// request in ms, and store round trips per request. The counters only
// grow; a Caddy that restarted between them gives no values.
func (st *stats) setEngine(a, b engineTimes) {
	n := float64(st.Requests)
	if n == 0 || b.RequestCount < a.RequestCount || b.StoreCount < a.StoreCount {
		return
	}
	if b.RequestCount > a.RequestCount {
		st.EngineMS = (b.RequestSeconds - a.RequestSeconds) / float64(b.RequestCount-a.RequestCount) * 1e3
	}
	st.StoreWaitMS = (b.StoreSeconds - a.StoreSeconds) / n * 1e3
	st.StoreTrips = float64(b.StoreCount-a.StoreCount) / n
}
