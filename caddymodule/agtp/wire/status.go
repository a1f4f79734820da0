package wire

import "net/http"

// agtpStatusText holds the reason phrases of the AGTP-specific status
// codes (spec/RCNS.md §19, agtp-09 §6.6). 465 is reserved and has none.
var agtpStatusText = map[int]string{
	261: "Negotiation In Progress",
	262: "Authorization Required",
	263: "Proposal Approved",
	455: "Scope Violation",
	456: "Budget Exceeded",
	457: "Zone Violation",
	458: "Counterparty Unverified",
	459: "Method Violation",
	460: "Endpoint Violation",
	461: "RCNS Contract Available",
	462: "Insufficient Budget",
	463: "Proposal Rejected",
	464: "RCNS No Contract",
	550: "Delegation Failure",
	551: "Authority Chain Broken",
}

// StatusText is the reason phrase for code on the AGTP/1.0 status line:
// the spec's name for an AGTP-specific code (263 "Proposal Approved",
// 461 "RCNS Contract Available", 464 "RCNS No Contract", …; spec/RCNS.md
// §19), else the standard phrase of net/http.StatusText (200 "OK", 422
// "Unprocessable Entity"), else "" for a code neither knows. The
// phrase is informational: agtp-09 §6.5.2 forbids a receiver to act on
// it.
func StatusText(code int) string {
	if s, ok := agtpStatusText[code]; ok {
		return s
	}
	return http.StatusText(code)
}
