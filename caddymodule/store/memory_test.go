package store_test

import (
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/storetest"
)

func TestMemory(t *testing.T) {
	h := storetest.Harness{
		New: func(t *testing.T, cfg storetest.Config) (store.Set, store.Set) {
			m := store.NewMemory(cfg.Limits, cfg.Now)
			t.Cleanup(func() { _ = m.Close() })
			return m.Set(), m.Set()
		},
		Totals:               true,
		ClockDrivesRetention: true,
	}
	storetest.Run(t, h)
	t.Run("gate-miss", func(t *testing.T) { storetest.RunGateMiss(t, h) })
}
