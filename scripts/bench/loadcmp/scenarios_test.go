package main

import (
	"strings"
	"testing"
)

// TestFilterScenarios: -only keeps the scenarios a key, letter or
// variant names, plus (a) and (b); a token that names none is an error
// before anything starts (it ran (a) and (b) alone, then crashed).
func TestFilterScenarios(t *testing.T) {
	all := scenarios(1000, 200)
	for _, only := range []string{"", "c/nokey", "d,nokey", "bh", "bd", "exchange", "e1,e3", "ed25519", "c/nokey,"} {
		got, err := filterScenarios(all, only)
		if err != nil || len(got) < 3 && only != "" {
			t.Errorf("-only %q: %d scenarios, %v", only, len(got), err)
		}
	}
	for _, only := range []string{"nosuch", "c/nokey,zz", "c/"} {
		if _, err := filterScenarios(all, only); err == nil || !strings.Contains(err.Error(), "names no scenario") {
			t.Errorf("-only %q: err = %v, want names no scenario", only, err)
		}
	}
}

// TestCheckProfileKeys: -profile takes scenario keys; one that names
// none is refused before anything starts (it was silently skipped).
func TestCheckProfileKeys(t *testing.T) {
	all := scenarios(1000, 200)
	for _, ok := range []string{"", "b", "b,c/nokey,d/nokey,f/nokey,g/nokey,c/ed25519,d/ed25519,g/ed25519", " bd , d/nokey "} {
		if err := checkProfileKeys(all, ok); err != nil {
			t.Errorf("-profile %q: %v", ok, err)
		}
	}
	for _, bad := range []string{"nonsense", "b,c", "d/nokey,zz"} {
		if err := checkProfileKeys(all, bad); err == nil || !strings.Contains(err.Error(), "names no scenario") {
			t.Errorf("-profile %q: err = %v, want names no scenario", bad, err)
		}
	}
}
