package caddymodule

import (
	"sync"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
)

// engines are the provisioned engines by rcns name, in provision order:
// a door that finds its handler by name (the native AGTP/1.0 listener)
// reaches the newest one still provisioned. A reload provisions the new
// engine before the old one is cleaned up, and a failed load cleans up
// only its own, so the name always reaches the engine serving it.
var engines = struct {
	sync.Mutex
	byName map[string][]*engine.Engine
}{byName: map[string][]*engine.Engine{}}

// register makes e reachable by name (after a successful Provision).
func register(name string, e *engine.Engine) {
	engines.Lock()
	defer engines.Unlock()
	engines.byName[name] = append(engines.byName[name], e)
}

// unregister removes e (Cleanup).
func unregister(name string, e *engine.Engine) {
	engines.Lock()
	defer engines.Unlock()
	list := engines.byName[name]
	for i, x := range list {
		if x == e {
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

// lookupEngine returns the engine of the rcns handler named name, nil
// when no handler of that name is provisioned.
func lookupEngine(name string) *engine.Engine {
	engines.Lock()
	defer engines.Unlock()
	list := engines.byName[name]
	if len(list) == 0 {
		return nil
	}
	return list[len(list)-1]
}
