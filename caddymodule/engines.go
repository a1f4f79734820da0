package caddymodule

import (
	"sync"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
)

// engines are the provisioned engines by rcns name, in provision order,
// each with the configuration load that provisioned it. A door that
// finds its handler by name (the native AGTP/1.0 listener) reaches the
// engine of its own configuration load: a reload provisions the new
// engine before the old one is cleaned up, and the listener serves the
// old configuration's engine until the new configuration's listener has
// started (it is then the socket's newest, nativeConn.serving), so a
// load whose provisioning fails is never served.
var engines = struct {
	sync.Mutex
	byName map[string][]registeredEngine
}{byName: map[string][]registeredEngine{}}

type registeredEngine struct {
	e    *engine.Engine
	load any
}

// loadOf identifies ctx's configuration load: its Done channel, one
// per load and shared by every module it provisions (Caddy derives
// each module's context from the load's by value or WithValue, which
// keep Done). nil for a context that never ends (tests).
func loadOf(ctx caddy.Context) any {
	if done := ctx.Done(); done != nil {
		return done
	}
	return nil
}

// register makes e reachable by name (after a successful Provision) for
// the doors of load.
func register(name string, e *engine.Engine, load any) {
	engines.Lock()
	defer engines.Unlock()
	engines.byName[name] = append(engines.byName[name], registeredEngine{e: e, load: load})
}

// unregister removes e (Cleanup).
func unregister(name string, e *engine.Engine) {
	engines.Lock()
	defer engines.Unlock()
	list := engines.byName[name]
	for i, x := range list {
		if x.e == e {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(engines.byName, name)
		return
	}
	engines.byName[name] = list
}

// lookupEngine returns the engine of the rcns handler named name that
// configuration load provisioned; nil when that load has none of that
// name. A nil load (a context that never ends: tests) takes the newest
// engine of the name.
func lookupEngine(name string, load any) *engine.Engine {
	engines.Lock()
	defer engines.Unlock()
	list := engines.byName[name]
	for i := len(list) - 1; i >= 0; i-- {
		if load == nil || list[i].load == load {
			return list[i].e
		}
	}
	return nil
}

// countEngines is how many rcns handlers configuration load provisioned
// under name.
func countEngines(name string, load any) int {
	engines.Lock()
	defer engines.Unlock()
	n := 0
	for _, r := range engines.byName[name] {
		if r.load == load {
			n++
		}
	}
	return n
}
