// Command upstream is the legacy REST service of the load comparison
// (scripts/bench/load.sh, docs/performance.md): go-httpbin plus two
// fixed JSON routes.
//
//	GET /items/{id}  {"id":ID,"name":"bench item","price":12.5}, answered at once
//	GET /slow/{id}   the same object after a fixed delay (-delay, default 20ms)
//	/ready           204 (readiness probe)
//	everything else  go-httpbin (github.com/mccutchen/go-httpbin/v2)
//
// It listens on loopback only.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mccutchen/go-httpbin/v2/httpbin"
)

func main() {
	host := flag.String("host", "127.0.0.1", "listen host (loopback only)")
	port := flag.Int("port", 0, "listen port (0: any free port, printed on stdout)")
	delay := flag.Duration("delay", 20*time.Millisecond, "fixed delay of /slow/{id}")
	maxLife := flag.Duration("max-lifetime", 2*time.Hour, "exit after this long")
	flag.Parse()

	if ip := net.ParseIP(*host); ip == nil || !ip.IsLoopback() {
		log.Fatalf("upstream: -host %q is not a loopback address", *host)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ln.Addr().String())

	bin := httpbin.New().Handler()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeItem(w, r, r.PathValue("id"))
	})
	mux.HandleFunc("GET /slow/{id}", func(w http.ResponseWriter, r *http.Request) {
		t := time.NewTimer(*delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
		writeItem(w, r, r.PathValue("id"))
	})
	mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.Handle("/", bin)

	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		select {
		case <-ctx.Done():
		case <-time.After(*maxLife):
		}
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

type item struct {
	ID    string  `json:"id"`
	Name  string  `json:"name"`
	Price float64 `json:"price"`
}

func writeItem(w http.ResponseWriter, r *http.Request, id string) {
	if id == "" || strings.Contains(id, "/") {
		http.NotFound(w, r)
		return
	}
	raw, _ := json.Marshal(item{ID: id, Name: "bench item", Price: 12.5})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(raw)))
	_, _ = w.Write(raw)
}
