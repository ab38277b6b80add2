// appservice-bench-replay: the replay apiserver of `deno task bench:watch`. Serves a recorded
// ConfigMap list (paged with limit/continue, or whole) and a recorded watch stream over TLS on
// 127.0.0.1 with the kube-apiserver's own HTTP stack (net/http + crypto/tls: HTTP/2 when the
// client offers it by ALPN, HTTP/1.1 otherwise), so that every client decodes the very same bytes
// and the apiserver's own speed drops out of the measurement.
//
// Usage: appservice-bench-replay -recording FILE -cert FILE -key FILE
//
// Prints the server's URL (one line) on stdout once it accepts connections. Exits when its
// standard input closes (so it never outlives the process that started it) or on SIGTERM or
// SIGINT, and then prints the requests it served, by kind and by protocol, as one JSON line on
// stdout: {"list":N,"watch":N,"other":N,"http1":N,"http2":N}.
//
// Semantics (as kube-apiserver answers them, for what the benchmark asks):
//   - GET /api/v1/namespaces/<ns>/configmaps and GET /api/v1/configmaps: the recorded items as a
//     ConfigMapList at the list's resourceVersion; `limit` pages it, `continue` is the offset of
//     the page, metadata.continue and remainingItemCount are set when items remain. Each page is
//     encoded on first request and kept. With resourceVersion=0 (and no continue) `limit` is
//     ignored and the whole list comes in one page, as kube-apiserver's watch cache answers such a
//     list (measured on 1.36: limit=500&resourceVersion=0 over 10,001 ConfigMaps, one page).
//   - the same with watch=true (or 1): from the list's resourceVersion, every recorded event
//     (newline-delimited JSON {type, object}) at once in writes of 64 KiB, each flushed, then the
//     stream stays open without sending until the client goes, timeoutSeconds pass (at most 15
//     minutes) or the server stops; from the last event's resourceVersion the same without
//     events; from any other resourceVersion one ERROR event (410 Expired) and the end.
//   - anything else: 404 with a Status.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// maxWatch is the longest a replayed watch stays open when the client asks for no timeout.
const maxWatch = 15 * time.Minute

// chunkBytes is the size of each write (and flush) of the replayed watch stream.
const chunkBytes = 64 * 1024

// recording is the file bench/watch.ts saves (its Recording type; other fields are ignored).
type recording struct {
	Namespace           string            `json:"namespace"`
	ListResourceVersion string            `json:"listResourceVersion"`
	Items               []json.RawMessage `json:"items"`
	Events              []json.RawMessage `json:"events"`
}

// counts are the requests served, by kind and by protocol.
type counts struct {
	list, watch, other atomic.Int64
	http1, http2       atomic.Int64
}

func (c *counts) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, `{"list":%d,"watch":%d,"other":%d,"http1":%d,"http2":%d}`,
		c.list.Load(), c.watch.Load(), c.other.Load(), c.http1.Load(), c.http2.Load()), nil
}

// replay is the http.Handler: the recording, pre-encoded.
type replay struct {
	namespace string
	listRV    string
	lastRV    string
	// items, each compact JSON.
	items [][]byte
	// chunks of the watch stream: whole event lines, each chunk at least chunkBytes but the last.
	chunks [][]byte
	counts counts
	// stop is closed (once, by shutdown) when the server stops: open watches end.
	stop     chan struct{}
	stopOnce sync.Once

	mu    sync.Mutex
	pages map[[2]int][]byte
}

// newReplay pre-encodes rec: compact items, the watch stream in chunks.
func newReplay(rec *recording) (*replay, error) {
	if rec.Namespace == "" || rec.ListResourceVersion == "" {
		return nil, errors.New("recording: namespace and listResourceVersion are required")
	}
	r := &replay{
		namespace: rec.Namespace,
		listRV:    rec.ListResourceVersion,
		lastRV:    rec.ListResourceVersion,
		items:     make([][]byte, len(rec.Items)),
		stop:      make(chan struct{}),
		pages:     map[[2]int][]byte{},
	}
	for i, it := range rec.Items {
		var b bytes.Buffer
		if err := json.Compact(&b, it); err != nil {
			return nil, fmt.Errorf("recording: item %d: %w", i, err)
		}
		r.items[i] = b.Bytes()
	}
	var pending bytes.Buffer
	for i, ev := range rec.Events {
		if err := json.Compact(&pending, ev); err != nil {
			return nil, fmt.Errorf("recording: event %d: %w", i, err)
		}
		pending.WriteByte('\n')
		if pending.Len() >= chunkBytes {
			r.chunks = append(r.chunks, bytes.Clone(pending.Bytes()))
			pending.Reset()
		}
	}
	if pending.Len() > 0 {
		r.chunks = append(r.chunks, bytes.Clone(pending.Bytes()))
	}
	if n := len(rec.Events); n > 0 {
		var last struct {
			Object struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
			} `json:"object"`
		}
		if err := json.Unmarshal(rec.Events[n-1], &last); err != nil {
			return nil, fmt.Errorf("recording: last event: %w", err)
		}
		if last.Object.Metadata.ResourceVersion != "" {
			r.lastRV = last.Object.Metadata.ResourceVersion
		}
	}
	return r, nil
}

// shutdown ends every open watch (and any later one at once).
func (r *replay) shutdown() {
	r.stopOnce.Do(func() { close(r.stop) })
}

// page is the encoded list page of limit items (0: all) from offset, encoded once.
func (r *replay) page(limit, offset int) []byte {
	offset = min(max(offset, 0), len(r.items))
	key := [2]int{limit, offset}
	r.mu.Lock()
	defer r.mu.Unlock()
	if b, ok := r.pages[key]; ok {
		return b
	}
	end := len(r.items)
	if limit > 0 {
		end = min(end, offset+limit)
	}
	var b bytes.Buffer
	b.WriteString(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":`)
	writeJSONString(&b, r.listRV)
	if end < len(r.items) {
		b.WriteString(`,"continue":`)
		writeJSONString(&b, strconv.Itoa(end))
		fmt.Fprintf(&b, `,"remainingItemCount":%d`, len(r.items)-end)
	}
	b.WriteString(`},"items":[`)
	for i, it := range r.items[offset:end] {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(it)
	}
	b.WriteString("]}")
	r.pages[key] = b.Bytes()
	return r.pages[key]
}

func writeJSONString(b *bytes.Buffer, s string) {
	q, _ := json.Marshal(s) // a string always marshals
	b.Write(q)
}

// status is a Status object of the apiserver.
func status(code int, reason, message string) map[string]any {
	return map[string]any{
		"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "reason": reason, "code": code, "message": message,
	}
}

func writeJSON(w http.ResponseWriter, code int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body) // a client that went away is no error of ours
}

func writeStatus(w http.ResponseWriter, code int, reason, message string) {
	b, _ := json.Marshal(status(code, reason, message))
	writeJSON(w, code, b)
}

// ServeHTTP serves the list, the watch, and 404 for the rest.
func (r *replay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.ProtoMajor == 2 {
		r.counts.http2.Add(1)
	} else {
		r.counts.http1.Add(1)
	}
	collection := "/api/v1/namespaces/" + r.namespace + "/configmaps"
	if req.Method != http.MethodGet ||
		(req.URL.Path != collection && req.URL.Path != "/api/v1/configmaps") {
		r.counts.other.Add(1)
		writeStatus(w, http.StatusNotFound, "NotFound",
			fmt.Sprintf("replay server: no %s %s", req.Method, req.URL.Path))
		return
	}
	q := req.URL.Query()
	if v := q.Get("watch"); v == "true" || v == "1" {
		r.counts.watch.Add(1)
		r.watch(w, req, q.Get("resourceVersion"), q.Get("timeoutSeconds"))
		return
	}
	r.counts.list.Add(1)
	limit, offset := 0, 0
	var err error
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil {
			writeStatus(w, http.StatusBadRequest, "BadRequest", "replay server: bad limit "+v)
			return
		}
	}
	if v := q.Get("continue"); v != "" {
		if offset, err = strconv.Atoi(v); err != nil {
			writeStatus(w, http.StatusBadRequest, "BadRequest", "replay server: bad continue "+v)
			return
		}
	} else if q.Get("resourceVersion") == "0" {
		limit = 0 // served whole, as from the watch cache
	}
	writeJSON(w, http.StatusOK, r.page(limit, offset))
}

// watch replays the stream from `from` (see the package comment).
func (r *replay) watch(w http.ResponseWriter, req *http.Request, from, timeoutSeconds string) {
	if from != r.listRV && from != r.lastRV {
		ev, _ := json.Marshal(map[string]any{
			"type": "ERROR",
			"object": status(http.StatusGone, "Expired",
				fmt.Sprintf("replay server: resourceVersion %s is not replayable", from)),
		})
		writeJSON(w, http.StatusOK, append(ev, '\n'))
		return
	}
	timeout := maxWatch
	if s, err := strconv.Atoi(timeoutSeconds); err == nil && s > 0 && s < int(maxWatch/time.Second) {
		timeout = time.Duration(s) * time.Second
	}
	var send [][]byte
	if from == r.listRV {
		send = r.chunks
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for _, c := range send {
		if _, err := w.Write(c); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
	if len(send) == 0 {
		if err := rc.Flush(); err != nil { // the headers, now
			return
		}
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-req.Context().Done():
	case <-t.C:
	case <-r.stop:
	}
}

func loadRecording(file string) (*recording, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rec recording
	if err := json.NewDecoder(bufio.NewReaderSize(f, 1<<20)).Decode(&rec); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return &rec, nil
}

func run() error {
	recFile := flag.String("recording", "", "the recording (JSON, as bench/watch.ts saves it)")
	certFile := flag.String("cert", "", "TLS serving certificate (PEM)")
	keyFile := flag.String("key", "", "TLS private key (PEM)")
	flag.Parse()
	if *recFile == "" || *certFile == "" || *keyFile == "" || flag.NArg() > 0 {
		flag.Usage()
		return errors.New("-recording, -cert and -key are required")
	}
	rec, err := loadRecording(*recFile)
	if err != nil {
		return err
	}
	h, err := newReplay(rec)
	if err != nil {
		return err
	}
	rec = nil // only the encoded form is kept
	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	// net/http's defaults, as the apiserver's own: ServeTLS adds "h2" and "http/1.1" to ALPN.
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}},
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(os.Stderr, "replay server: ", log.LstdFlags),
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(ln, "", "") }()
	fmt.Printf("https://%s\n", ln.Addr())

	// Stop on stdin closed, SIGTERM or SIGINT, or when serving fails.
	stopped := make(chan string, 1)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stopped <- "stdin closed"
	}()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	var serveErr error
	select {
	case <-stopped:
	case <-sigs:
	case serveErr = <-served:
	}
	h.shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		_ = srv.Close()
	}
	out, _ := json.Marshal(&h.counts)
	fmt.Println(string(out))
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "appservice-bench-replay: %v\n", err)
		os.Exit(1)
	}
}
