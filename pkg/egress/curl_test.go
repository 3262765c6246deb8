package egress

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http/httpproxy"
)

// curl runs the real curl binary with a bare environment (so no proxy
// variable of the machine interferes) and returns its stdout.
func curl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	path, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not installed: apt-get install curl")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append([]string{"--silent", "--show-error", "--fail", "--max-time", "20"}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("curl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out.String(), err
}

// bigBody is deterministic data that makes a large download checkable.
func bigBody(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func testHandler() http.Handler {
	big := bigBody(8 << 20)
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s via %s", r.Host, r.Proto)
	})
	mux.HandleFunc("/chunked", func(w http.ResponseWriter, r *http.Request) {
		for i := range 5 {
			fmt.Fprintf(w, "part%d;", i)
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(big)))
		w.Write(big)
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%d %s", len(b), sum(b))
	})
	return mux
}

// curl through the proxy: plain HTTP (absolute form), HTTPS via CONNECT,
// chunked responses, HEAD, an 8 MiB download and a chunked upload.
func TestCurlThroughProxy(t *testing.T) {
	plain := httptest.NewServer(testHandler())
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(testHandler())
	defer tlsSrv.Close()
	_, plainPort, _ := net.SplitHostPort(plain.Listener.Addr().String())
	_, tlsPort, _ := net.SplitHostPort(tlsSrv.Listener.Addr().String())
	pol, err := ParsePolicy("allowlist", []string{"plain.test", "*.tls.test"}, []string{"127.0.0.0/8"})
	require.NoError(t, err)
	proxy := "http://" + startProxy(t, &Proxy{Policy: pol, Resolver: resolverOf("plain.test", "127.0.0.1", "www.tls.test", "127.0.0.1", "denied.test", "127.0.0.1")})
	httpURL := "http://plain.test:" + plainPort
	httpsURL := "https://www.tls.test:" + tlsPort

	out, err := curl(t, "-x", proxy, httpURL+"/hello")
	require.NoError(t, err)
	assert.Equal(t, "hello plain.test:"+plainPort+" via HTTP/1.1", out)

	out, err = curl(t, "-x", proxy, "-k", httpsURL+"/hello")
	require.NoError(t, err)
	assert.Equal(t, "hello www.tls.test:"+tlsPort+" via HTTP/1.1", out)

	for _, base := range []string{httpURL, httpsURL} {
		t.Run(base[:strings.Index(base, ":")], func(t *testing.T) {
			out, err := curl(t, "-x", proxy, "-k", base+"/chunked")
			require.NoError(t, err)
			assert.Equal(t, "part0;part1;part2;part3;part4;", out)

			out, err = curl(t, "-x", proxy, "-k", "--head", base+"/big")
			require.NoError(t, err)
			assert.Contains(t, strings.ToLower(out), "content-length: 8388608")

			dir := t.TempDir()
			_, err = curl(t, "-x", proxy, "-k", "-o", filepath.Join(dir, "big"), base+"/big")
			require.NoError(t, err)
			got, err := os.ReadFile(filepath.Join(dir, "big"))
			require.NoError(t, err)
			assert.Equal(t, sum(bigBody(8<<20)), sum(got))

			upload := bigBody(1 << 20)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "up"), upload, 0o600))
			out, err = curl(t, "-x", proxy, "-k", "-H", "Transfer-Encoding: chunked", "--data-binary", "@"+filepath.Join(dir, "up"), base+"/echo")
			require.NoError(t, err)
			assert.Equal(t, fmt.Sprintf("%d %s", len(upload), sum(upload)), out)
		})
	}

	// Refusals reach curl as what they are.
	_, err = curl(t, "-x", proxy, "http://denied.test:"+plainPort+"/hello")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "403")
	_, err = curl(t, "-x", proxy, "-k", "https://denied.test:"+tlsPort+"/hello")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "403")
}

// curl with the visitor's URL, token as credentials, as a verifier would.
func TestCurlThroughVisitor(t *testing.T) {
	tlsSrv := httptest.NewTLSServer(testHandler())
	defer tlsSrv.Close()
	_, port, _ := net.SplitHostPort(tlsSrv.Listener.Addr().String())
	v, addr := startVisitor(t, resolverOf("tls.test", "127.0.0.1"))
	_, err := curl(t, "-x", "http://"+addr, "-k", "https://tls.test:"+port+"/hello")
	require.Error(t, err, "no visit open")
	token, done := v.Open(publicLoopback())
	defer done()
	out, err := curl(t, "-x", VisitorURL(addr, token), "-k", "https://tls.test:"+port+"/hello")
	require.NoError(t, err)
	assert.Equal(t, "hello tls.test:"+port+" via HTTP/1.1", out)
}

// A Go program using http.ProxyFromEnvironment's logic with ProxyEnv's
// variables (read through httpproxy, which does not cache the environment
// for the process's life as ProxyFromEnvironment does).
func TestGoClientWithProxyEnv(t *testing.T) {
	srv := httptest.NewServer(testHandler())
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	proxy := "http://" + startProxy(t, &Proxy{Policy: publicLoopback(), Resolver: resolverOf("go.test", "127.0.0.1")})
	for _, kv := range ProxyEnv(proxy, nil) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	proxyFor := httpproxy.FromEnvironment().ProxyFunc()
	tr := &http.Transport{Proxy: func(r *http.Request) (*url.URL, error) { return proxyFor(r.URL) }}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://go.test:" + port + "/hello")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	assert.Equal(t, "hello go.test:"+port+" via HTTP/1.1", string(b))
}
