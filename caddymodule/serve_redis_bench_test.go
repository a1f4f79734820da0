package caddymodule

import (
	"strconv"
	"strings"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
)

// BenchmarkServeStore gives the request kinds of make bench's Redis
// comparison (issue 32) in process, each on the memory store and on a
// real loopback redis-server (no persistence): Caddy-side CPU per
// request (cpu-ns/op: this process only, the Redis server's own CPU is
// not in it), bytes and allocations, so the two stores' difference per
// kind is read from one run. On Redis it also reports the server's side
// from its INFO, read before and after the loop: redis-cpu-ns/op (its
// used_cpu_user + used_cpu_sys) and redis-cmds/op (commands run,
// inside scripts or not, from commandstats):
//
//	c-tierB        FETCH /items/1 (no key)
//	c-keyed        FETCH /items/1 with a fresh Idempotency-Key
//	d-present      LOOKUP /item/… presenting a one-step contract
//	f-refusal      LOOKUP /nothing with Allow-RCNS → 464
//	g-synthesis    LOOKUP /item/<fresh> with Allow-RCNS → 263
//
// No record key (the store's part alone). Run with
// `go test ./caddymodule -run '^$' -bench BenchmarkServeStore`; it
// needs redis-server (make deps).
func BenchmarkServeStore(b *testing.B) {
	up := benchUpstream(b)
	srv := redistest.StartServer(b)
	runs := 0
	for _, st := range []string{"memory", "redis"} {
		run := loop
		if st == "redis" {
			run = func(b *testing.B, fn func(i int)) {
				before := srv.Usage()
				loop(b, fn)
				before.PerOp(b, srv.Usage(), b.N)
			}
		}
		var h *Handler
		if st == "redis" {
			h = benchHandlerWith(b, up.URL, false, "", "", func(h *Handler) {
				h.Store = StoreRedis
				h.Redis = &RedisConfig{Addresses: []string{srv.Addr()}, KeyPrefix: "bench:"}
				// Its own name: provisioned under the memory handler's
				// name in another context, it would be a reload that
				// moved the keys, refusing keyed requests for the lease.
				h.Name += "-redis"
			})
		} else {
			h = benchHandler(b, up.URL, false)
		}
		read := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "bench:read"}
		readJSON := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "bench:read", "Content-Type": "application/json"}
		negotiate := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read", "Allow-RCNS": "true", "Content-Type": "application/json"}
		const one = `{"parameters":{"item_id":"1"}}`

		b.Run("c-tierB/"+st, func(b *testing.B) {
			run(b, func(int) { serveOnce(b, h, notFound, "FETCH", "/items/1", "", read, 200) })
		})
		b.Run("c-keyed/"+st, func(b *testing.B) {
			runs++
			prefix := "bk-" + strconv.Itoa(runs) + "-"
			hdr := map[string]string{"Idempotency-Key": ""}
			for k, v := range read {
				hdr[k] = v
			}
			run(b, func(i int) {
				hdr["Idempotency-Key"] = prefix + strconv.Itoa(i)
				serveOnce(b, h, notFound, "FETCH", "/items/1", "", hdr, 200)
			})
		})
		b.Run("d-present/"+st, func(b *testing.B) {
			runs++
			path := "/item/d-" + st + "-" + strconv.Itoa(runs)
			w := serveOnce(b, h, notFound, "LOOKUP", path, one, negotiate, 263)
			hdr := map[string]string{"Contract-Synthesized": w.hdr.Get("Contract-Synthesized")}
			for k, v := range readJSON {
				hdr[k] = v
			}
			run(b, func(int) { serveOnce(b, h, notFound, "LOOKUP", path, one, hdr, 200) })
		})
		b.Run("f-refusal/"+st, func(b *testing.B) {
			hdr := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read", "Allow-RCNS": "true"}
			run(b, func(int) { serveOnce(b, h, notFound, "LOOKUP", "/nothing", "", hdr, 464) })
		})
		b.Run("g-synthesis/"+st, func(b *testing.B) {
			runs++
			prefix := "/item/g-" + strings.ToLower(st) + "-" + strconv.Itoa(runs) + "-"
			run(b, func(i int) { serveOnce(b, h, notFound, "LOOKUP", prefix+strconv.Itoa(i), one, negotiate, 263) })
		})
	}
}
