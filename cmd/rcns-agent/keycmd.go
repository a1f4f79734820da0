package main

import (
	"context"
	"encoding/json"
	"io"
)

// keyCmd is `rcns-agent key inspect|release|resolve`: the operator's
// tool for one Idempotency-Key of an agent (docs/cluster.md "Failure
// modes"). It sends, with call's flags (the operator's -agent-id, -key,
// TLS), INSPECT target=idempotency-key or REVOKE target=idempotency-key
// with action release or resolve to URL, and prints the answer:
//
//	rcns-agent key inspect|release|resolve [call flags] -for AGENT-ID
//	        -target-key KEY [-reason TEXT] [-status N] [-result JSON] URL
//
// -scope defaults to inspect:all (REVOKE needs it; INSPECT of another
// agent's key too). release frees an outcome-unknown key (the request
// did not run: its next retry runs); resolve stores an answer for it
// (status, default 200, and result, default null), which every retry
// replays. Exit status as call's.
func keyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageErr("key needs inspect, release or resolve")
	}
	action := args[0]
	if action != "inspect" && action != "release" && action != "resolve" {
		return usageErr("key: %q is not inspect, release or resolve", action)
	}
	fs := newFlags("key "+action, stderr)
	o := callFlags(fs)
	forAgent := fs.String("for", "", "Agent-ID whose Idempotency-Key it is")
	target := fs.String("target-key", "", "the Idempotency-Key")
	reason := fs.String("reason", "", "why (release, resolve): recorded with the operator's negotiation record")
	status := fs.Int("status", 0, "resolve: the 2xx status of the stored answer (default 200)")
	result := fs.String("result", "", "resolve: the JSON result of the stored answer (default null)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return usageErr("key %s takes its flags before URL (%q came after it)", action, fs.Arg(1))
	}
	if *forAgent == "" || *target == "" {
		return usageErr("key %s needs -for and -target-key", action)
	}
	if fs.NArg() != 1 {
		return usageErr("key %s needs URL", action)
	}
	if action == "inspect" && *reason != "" {
		return usageErr("-reason goes with key release and key resolve")
	}
	if *o.scope == "" {
		*o.scope = "inspect:all"
	}
	p := map[string]any{"target": "idempotency-key", "agent_id": *forAgent, "key": *target}
	method := "REVOKE"
	switch action {
	case "inspect":
		method = "INSPECT"
	case "release", "resolve":
		p["action"] = action
		if *reason != "" {
			p["reason"] = *reason
		}
	}
	if action != "resolve" && (*status != 0 || *result != "") {
		return usageErr("-status and -result go with key resolve")
	}
	if *status != 0 {
		p["status"] = *status
	}
	if *result != "" {
		if !json.Valid([]byte(*result)) {
			return usageErr("-result is not valid JSON")
		}
		p["result"] = json.RawMessage(*result)
	}
	body, err := json.Marshal(map[string]any{"parameters": p})
	if err != nil {
		return err
	}
	return o.send(ctx, fs, method, fs.Arg(0), body, stdout)
}
