package main

import (
	"bytes"
	_ "embed"
	"fmt"
	"strings"
	"text/template"
	"time"
)

// pageTemplate is docs/performance.md's text; renderPage fills it in.
//
//go:embed page.md.tmpl
var pageTemplate string

// pageData is what the page template reads.
type pageData struct {
	Meta     map[string]string
	O        options
	Verdicts []verdict
	Missed   int // targets measured and not met
	// Split counts the verdicts some of whose rounds went the other
	// way (verdict.Against): the median alone carries them.
	Split      int
	Unmeasured int // targets whose scenarios did not run
	Load, Slow []*summary
	Store      []storeCmp  // the redis site against nokey
	Creds      []storeCmp  // credential policies against static headers
	Floor      []storeCmp  // the floor against (b)
	Letters    [][2]string // letter, description, in table order
	Sites      []*site     // the sites the run's scenarios use
	OtherMed   float64     // cores
	OtherMax   float64     // cores
	StatRuns   int         // runs whose Caddy CPU came from /proc/PID/stat ticks
	Runs       int
	// Stages: for each missed target whose scenario was profiled, the
	// heaviest functions of this module in its profile.
	Stages []stage
	// Latency: the missed p50 targets, stage by stage (latency.go).
	Latency latencyTable
}

// maxStages bounds the missed targets the page breaks down, of each
// kind of breakdown (the page
// stays readable); profiles/summary.txt has every profile.
const maxStages = 4

// maxDiffs bounds the functions of a compared stage breakdown.
const maxDiffs = 6

// stage is a missed target's profile breakdown: Frames, the heaviest
// functions of its scenario; or, for a target judged against another
// scenario (kindVs, kindP50Vs), Diffs, the functions that grew most
// from that scenario's profile to its own.
type stage struct {
	Key    string
	V      verdict
	Frames []frame
	Diffs  []costDiff
}

var pageFuncs = template.FuncMap{
	"f0": func(v float64) string { return fmt.Sprintf("%.0f", v) },
	"f1": func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"f2": func(v float64) string { return fmt.Sprintf("%.2f", v) },
	// us: a difference in µs with its range, "+4.2 (−1.0 to +9.3)".
	"us": func(s spread) string {
		if s.N == 0 {
			return "—"
		}
		return fmt.Sprintf("%+.1f (%+.1f to %+.1f)", s.Med, s.Lo, s.Hi)
	},
	// ratio: a ratio with its range, "0.91 (0.88–0.95)".
	"ratio": func(s spread) string {
		if s.N == 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f (%.2f–%.2f)", s.Med, s.Lo, s.Hi)
	},
	// ms: a difference in ms with its range, "+0.12 (+0.05 to +0.30)".
	"ms": func(s spread) string {
		if s.N == 0 {
			return "—"
		}
		return fmt.Sprintf("%+.2f (%+.2f to %+.2f)", s.Med, s.Lo, s.Hi)
	},
	"dur": func(d time.Duration) string { return d.String() },
	// shown: a scenario path as the page shows it, "{run}" and "{i}" as "…".
	"shown": func(p string) string { return strings.NewReplacer("{run}", "…", "{i}", "…").Replace(p) },
}

// renderPage renders the page of a comparison's results.
func renderPage(r *results) (string, error) {
	t, err := template.New("page.md.tmpl").Funcs(pageFuncs).Option("missingkey=error").Parse(pageTemplate)
	if err != nil {
		return "", err
	}
	pd := pageData{Meta: r.Meta, O: r.Options, Verdicts: r.judge(), Runs: len(r.Runs)}
	staged := map[string]bool{} // Key+" "+Of pairs already broken down
	frameStages, diffStages := 0, 0
	var latency []latencyStage
	for _, v := range pd.Verdicts {
		if v.Against > 0 {
			pd.Split++
		}
		switch {
		case !v.Measured:
			pd.Unmeasured++
		case !v.Met:
			pd.Missed++
			if v.T.Kind == kindP50Vs {
				if ls, ok := r.latencyBreakdown(v); ok {
					latency = append(latency, ls)
				}
			}
			compared := v.T.Kind == kindVs || v.T.Kind == kindP50Vs
			switch {
			case compared && diffStages < maxStages && len(r.Costs[v.T.Key]) > 0 && len(r.Costs[v.T.Of]) > 0:
				if !staged[v.T.Key+" "+v.T.Of] {
					staged[v.T.Key+" "+v.T.Of] = true
					diffStages++
					pd.Stages = append(pd.Stages, stage{Key: v.T.Key, V: v, Diffs: diffCosts(r.Costs[v.T.Key], r.Costs[v.T.Of], maxDiffs)})
				}
			case !compared && frameStages < maxStages && len(r.Profiles[v.T.Key]) > 0:
				frameStages++
				pd.Stages = append(pd.Stages, stage{Key: v.T.Key, V: v, Frames: r.Profiles[v.T.Key]})
			}
		}
	}
	seenLetter, seenSite := map[string]bool{}, map[string]bool{}
	for _, sm := range r.summarize() {
		if sm.S.Phase == phaseSlow {
			pd.Slow = append(pd.Slow, sm)
		} else {
			pd.Load = append(pd.Load, sm)
		}
		pd.StatRuns += sm.StatRuns
		if !seenLetter[sm.S.Letter] {
			seenLetter[sm.S.Letter] = true
			pd.Letters = append(pd.Letters, [2]string{sm.S.Letter, letters[sm.S.Letter]})
		}
		seenSite[sm.S.Site] = true
	}
	for _, s := range sites {
		if seenSite[s.Name] {
			pd.Sites = append(pd.Sites, s)
		}
	}
	if len(latency) > 0 {
		// The floor beside the missed p50 targets: what their one
		// round trip costs at the least, stage by stage.
		if ls, ok := r.latencyBreakdown(verdict{T: target{Key: floorKey, Of: "b", Kind: kindP50Vs}, Measured: true}); ok {
			latency = append(latency, ls)
		}
	}
	pd.Latency = latencyTableOf(latency)
	pd.Store = r.storeComparisons()
	pd.Creds = r.credentialComparisons()
	pd.Floor = r.floorComparisons()
	pd.OtherMed, pd.OtherMax = r.otherLoad()
	var b bytes.Buffer
	if err := t.Execute(&b, pd); err != nil {
		return "", err
	}
	return b.String(), nil
}
