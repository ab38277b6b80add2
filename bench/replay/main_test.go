package main

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// testRecording has n items and n events (RVs 101..100+n after the list at 100), events padded
// so that the stream spans several chunks.
func testRecording(t *testing.T, n int) *recording {
	t.Helper()
	rec := &recording{Namespace: "ns", ListResourceVersion: "100"}
	pad := strings.Repeat("x", 1000)
	for i := range n {
		rec.Items = append(rec.Items, json.RawMessage(fmt.Sprintf(
			`{ "metadata": {"name": "cm-%d", "resourceVersion": "%d"} }`, i, 50+i)))
		rec.Events = append(rec.Events, json.RawMessage(fmt.Sprintf(
			`{"type": "MODIFIED", "object": {"metadata": {"name": "cm-%d", "resourceVersion": "%d"},
			  "data": {"pad": "%s"}}}`, i, 101+i, pad)))
	}
	return rec
}

// serve starts the handler over TLS with HTTP/2 offered; h2 selects the client's protocol.
func serve(t *testing.T, rec *recording, h2 bool) (*replay, *httptest.Server, *http.Client) {
	t.Helper()
	h, err := newReplay(rec)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(func() {
		h.shutdown()
		srv.Close()
	})
	c := srv.Client()
	if !h2 {
		tr := c.Transport.(*http.Transport).Clone()
		tr.ForceAttemptHTTP2 = false
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
		c = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	} else {
		c.Timeout = 10 * time.Second
	}
	return h, srv, c
}

func get(t *testing.T, c *http.Client, url string, wantProto string) (int, []byte) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Proto != wantProto {
		t.Errorf("%s: proto %s, want %s", url, resp.Proto, wantProto)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

type listPage struct {
	Kind     string `json:"kind"`
	Metadata struct {
		ResourceVersion    string `json:"resourceVersion"`
		Continue           string `json:"continue"`
		RemainingItemCount *int   `json:"remainingItemCount"`
	} `json:"metadata"`
	Items []struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	} `json:"items"`
}

func TestListPages(t *testing.T) {
	for _, h2 := range []bool{true, false} {
		proto := map[bool]string{true: "HTTP/2.0", false: "HTTP/1.1"}[h2]
		t.Run(proto, func(t *testing.T) {
			h, srv, c := serve(t, testRecording(t, 5), h2)
			var names []string
			cont := ""
			for range 10 { // at most 10 pages
				code, b := get(t, c, srv.URL+"/api/v1/namespaces/ns/configmaps?limit=2&continue="+cont, proto)
				var p listPage
				if err := json.Unmarshal(b, &p); err != nil || code != 200 {
					t.Fatalf("page %q: %d %v %s", cont, code, err, b)
				}
				if p.Kind != "ConfigMapList" || p.Metadata.ResourceVersion != "100" {
					t.Fatalf("page %q: %s", cont, b)
				}
				for _, it := range p.Items {
					names = append(names, it.Metadata.Name)
				}
				if p.Metadata.Continue == "" {
					if p.Metadata.RemainingItemCount != nil {
						t.Errorf("last page has remainingItemCount")
					}
					break
				}
				if want := 5 - len(names); p.Metadata.RemainingItemCount == nil || *p.Metadata.RemainingItemCount != want {
					t.Errorf("remainingItemCount %v, want %d", p.Metadata.RemainingItemCount, want)
				}
				cont = p.Metadata.Continue
			}
			if got := strings.Join(names, ","); got != "cm-0,cm-1,cm-2,cm-3,cm-4" {
				t.Errorf("paged items %s", got)
			}
			_, whole := get(t, c, srv.URL+"/api/v1/configmaps", proto)
			_, again := get(t, c, srv.URL+"/api/v1/configmaps?limit=0", proto)
			// resourceVersion=0: whole, whatever the limit (the watch cache's answer).
			_, cached := get(t, c, srv.URL+"/api/v1/configmaps?limit=2&resourceVersion=0", proto)
			if string(whole) != string(again) || string(whole) != string(cached) ||
				!strings.Contains(string(whole), `"items":[{"metadata":{"name":"cm-0","resourceVersion":"50"}},`) {
				t.Errorf("whole list: %s", whole)
			}
			if h.counts.list.Load() != 6 || h.counts.http1.Load()+h.counts.http2.Load() != 6 ||
				(h.counts.http2.Load() == 6) != h2 {
				t.Errorf("counts %+v", &h.counts)
			}
		})
	}
}

func TestWatch(t *testing.T) {
	for _, h2 := range []bool{true, false} {
		proto := map[bool]string{true: "HTTP/2.0", false: "HTTP/1.1"}[h2]
		t.Run(proto, func(t *testing.T) {
			const n = 200 // about 200 KB: four chunks
			h, srv, c := serve(t, testRecording(t, n), h2)
			base := srv.URL + "/api/v1/namespaces/ns/configmaps?watch=true&timeoutSeconds=1&resourceVersion="
			if len(h.chunks) < 3 {
				t.Fatalf("%d chunks", len(h.chunks))
			}

			// From the list: every event at once, then open until timeoutSeconds.
			start := time.Now()
			resp, err := c.Get(base + "100")
			if err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 1<<20)
			for i := range n {
				if !sc.Scan() {
					t.Fatalf("stream ended after %d events: %v", i, sc.Err())
				}
				var ev struct {
					Type   string `json:"type"`
					Object struct {
						Metadata struct {
							ResourceVersion string `json:"resourceVersion"`
						} `json:"metadata"`
					} `json:"object"`
				}
				if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Type != "MODIFIED" ||
					ev.Object.Metadata.ResourceVersion != fmt.Sprint(101+i) {
					t.Fatalf("event %d: %v %s", i, err, sc.Bytes())
				}
			}
			if since := time.Since(start); since > 900*time.Millisecond {
				t.Errorf("events took %v", since)
			}
			if sc.Scan() {
				t.Errorf("more after the events: %s", sc.Bytes())
			}
			if since := time.Since(start); since < time.Second {
				t.Errorf("stream ended after %v, before timeoutSeconds", since)
			}
			resp.Body.Close()

			// From the last event: headers at once, no events.
			start = time.Now()
			resp, err = c.Get(base + fmt.Sprint(100+n))
			if err != nil {
				t.Fatal(err)
			}
			if since := time.Since(start); since > 500*time.Millisecond {
				t.Errorf("headers after %v", since)
			}
			if b, _ := io.ReadAll(resp.Body); len(b) != 0 {
				t.Errorf("from the last RV: %s", b)
			}
			resp.Body.Close()

			// Any other: 410 Expired.
			code, b := get(t, c, base+"7", proto)
			var ev struct {
				Type   string `json:"type"`
				Object struct {
					Code   int    `json:"code"`
					Reason string `json:"reason"`
				} `json:"object"`
			}
			if err := json.Unmarshal(b, &ev); err != nil || code != 200 || ev.Type != "ERROR" ||
				ev.Object.Code != 410 || ev.Object.Reason != "Expired" || !strings.HasSuffix(string(b), "}\n") {
				t.Errorf("other RV: %d %s", code, b)
			}

			// The server stopping ends an open watch.
			resp, err = c.Get(strings.Replace(base, "timeoutSeconds=1", "timeoutSeconds=60", 1) + fmt.Sprint(100+n))
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				time.Sleep(100 * time.Millisecond)
				h.shutdown()
			}()
			start = time.Now()
			_, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if since := time.Since(start); since > 5*time.Second {
				t.Errorf("stop ended the watch after %v", since)
			}
			if h.counts.watch.Load() != 4 || h.counts.list.Load() != 0 {
				t.Errorf("counts %+v", &h.counts)
			}
		})
	}
}

func TestNotFound(t *testing.T) {
	h, srv, c := serve(t, testRecording(t, 1), true)
	for _, path := range []string{"/api/v1/namespaces/other/configmaps", "/api/v1/pods", "/"} {
		code, b := get(t, c, srv.URL+path, "HTTP/2.0")
		if code != 404 || !strings.Contains(string(b), `"reason":"NotFound"`) {
			t.Errorf("%s: %d %s", path, code, b)
		}
	}
	resp, err := c.Post(srv.URL+"/api/v1/configmaps", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("POST: %d", resp.StatusCode)
	}
	if out, _ := json.Marshal(&h.counts); string(out) != `{"list":0,"watch":0,"other":4,"http1":0,"http2":4}` {
		t.Errorf("counts %s", out)
	}
}
