package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"time"
)

// proxySet is the egress rows' cast: three upstreams on the substrate's
// loopback, and the four ways of reaching them.
type proxySet struct {
	httpUp, streamUp, echoUp string
	sides                    []egressSide
	client                   string // the egress client binary (a copy of this program)
}

// egressSide is one way to the upstreams.
type egressSide struct {
	name      string
	proxy     string  // host:port; "" is direct
	inSandbox bool    // the client must run inside the sandbox (sandboxd's proxy)
	d         *daemon // the sandbox it runs in; nil: the main daemon's
	netns     string  // else a network namespace of the bench's own to run it in
	target    string  // where the client dials, if not the row's upstream
}

// sandboxdProxy is where sandboxd's agent proxy listens, inside the sandbox.
const sandboxdProxy = "127.0.0.1:3128"

func (b *bench) proxySet(ctx context.Context) (*proxySet, error) {
	if b.proxies != nil {
		return b.proxies, nil
	}
	if _, err := b.mainDaemon(ctx); err != nil {
		return nil, err
	}
	ps := &proxySet{}
	var err error
	if ps.httpUp, err = b.serveUpstream("http", serveHTTPUpstream); err != nil {
		return nil, err
	}
	if ps.streamUp, err = b.serveUpstream("stream", serveStream); err != nil {
		return nil, err
	}
	if ps.echoUp, err = b.serveUpstream("echo", serveEcho); err != nil {
		return nil, err
	}
	// A copy of this program in the run's directory, which the sandbox sees
	// (its root is the substrate's /): `go run` may remove its own binary.
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ps.client = filepath.Join(b.tmp, "egress-client")
	if err := copyFile(self, ps.client, 0o755); err != nil {
		return nil, err
	}
	tiny, err := b.startTinyproxy(ctx)
	if err != nil {
		return nil, err
	}
	squid, err := b.startSquid(ctx)
	if err != nil {
		return nil, err
	}
	ps.sides = []egressSide{
		{name: "direct"},
		{name: "sandboxd", proxy: sandboxdProxy, inSandbox: true},
		{name: "tinyproxy", proxy: tiny},
		{name: "squid", proxy: squid},
	}
	b.proxies = ps
	return ps, nil
}

// serveUpstream listens on a loopback port and serves each connection with fn
// until the run ends.
func (b *bench) serveUpstream(name string, fn func(net.Listener)) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	b.cleanup.Add("close upstream "+name, func() { ln.Close() })
	go fn(ln)
	return ln.Addr().String(), nil
}

var zeros = make([]byte, 256<<10)

// serveHTTPUpstream answers GET /bytes/N with N zero bytes and GET /small
// with two bytes, keep-alive.
func serveHTTPUpstream(ln net.Listener) {
	mux := http.NewServeMux()
	mux.HandleFunc("/bytes/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.ParseInt(r.PathValue("n"), 10, 64)
		if err != nil || n < 0 {
			http.Error(w, "bad size", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		for n > 0 {
			k := min(n, int64(len(zeros)))
			if _, err := w.Write(zeros[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	mux.HandleFunc("/small", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: time.Minute}
	srv.Serve(ln)
}

// serveStream reads an 8-byte big-endian count and writes that many zeros,
// as often as asked.
func serveStream(ln net.Listener) {
	eachConn(ln, func(c net.Conn) {
		var req [8]byte
		for {
			if _, err := io.ReadFull(c, req[:]); err != nil {
				return
			}
			n := int64(binary.BigEndian.Uint64(req[:]))
			for n > 0 {
				k := min(n, int64(len(zeros)))
				if _, err := c.Write(zeros[:k]); err != nil {
					return
				}
				n -= k
			}
		}
	})
}

// serveEcho writes back whatever it reads.
func serveEcho(ln net.Listener) {
	eachConn(ln, func(c net.Conn) {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		io.CopyBuffer(c, c, make([]byte, 4096))
	})
}

// eachConn serves every connection ln accepts with handle, in a goroutine of
// its own, and closes it after; it returns once ln is closed.
func eachConn(ln net.Listener, handle func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			handle(c)
		}()
	}
}

// startTinyproxy runs tinyproxy with Debian's default configuration, moved to
// a port and files of the benchmark's, and MaxClients raised from 100 to 256
// so that the 100-tunnel row is not refused.
func (b *bench) startTinyproxy(ctx context.Context) (string, error) {
	dir := filepath.Join(b.tmp, "tinyproxy")
	if err := ownedDir(dir, "tinyproxy"); err != nil {
		return "", err
	}
	port, err := freePort()
	if err != nil {
		return "", err
	}
	conf := filepath.Join(dir, "tinyproxy.conf")
	cfg := fmt.Sprintf(`# written by test/bench: Debian's defaults, on a port and files of our own
User tinyproxy
Group tinyproxy
Port %d
Listen 127.0.0.1
Timeout 600
DefaultErrorFile "/usr/share/tinyproxy/default.html"
StatFile "/usr/share/tinyproxy/stats.html"
LogFile "%s/tinyproxy.log"
LogLevel Info
PidFile "%s/tinyproxy.pid"
MaxClients 256
Allow 127.0.0.1
ViaProxyName "tinyproxy"
`, port, dir, dir)
	if err := os.WriteFile(conf, []byte(cfg), 0o644); err != nil {
		return "", err
	}
	bin, err := exec.LookPath("tinyproxy")
	if err != nil {
		return "", err
	}
	_, addr, err := b.startServer(ctx, "tinyproxy", exec.Command(bin, "-d", "-c", conf), filepath.Join(dir, "stderr.log"), port)
	return addr, err
}

// startSquid runs squid in the foreground with no cache (nothing of the
// benchmark is cacheable anyway: every object is bigger than the default
// maximum or tiny and repeated, and caching would flatter squid), access
// logging on as by default, every other setting at its default.
func (b *bench) startSquid(ctx context.Context) (string, error) {
	dir := filepath.Join(b.tmp, "squid")
	if err := ownedDir(dir, "proxy"); err != nil {
		return "", err
	}
	port, err := freePort()
	if err != nil {
		return "", err
	}
	conf := filepath.Join(dir, "squid.conf")
	cfg := fmt.Sprintf(`# written by test/bench: squid's defaults but for these lines
http_port 127.0.0.1:%d
http_access allow all
cache deny all
pid_filename %[2]s/squid.pid
cache_log %[2]s/cache.log
access_log stdio:%[2]s/access.log squid
coredump_dir %[2]s
netdb_filename none
visible_hostname sandboxd-bench
pinger_enable off
shutdown_lifetime 0 seconds
`, port, dir)
	if err := os.WriteFile(conf, []byte(cfg), 0o644); err != nil {
		return "", err
	}
	bin, err := exec.LookPath("squid")
	if err != nil {
		return "", err
	}
	if out, err := runCmd(ctx, bin, "-k", "parse", "-f", conf); err != nil {
		return "", fmt.Errorf("squid refuses the generated config: %w: %s", err, out)
	}
	_, addr, err := b.startServer(ctx, "squid", exec.Command(bin, "-N", "-f", conf), filepath.Join(dir, "stderr.log"), port)
	return addr, err
}

// ownedDir creates dir owned by the named user, for a server that drops to it.
func ownedDir(dir, owner string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	u, err := user.Lookup(owner)
	if err != nil {
		return fmt.Errorf("user %s (from its Debian package): %w", owner, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return os.Chown(dir, uid, gid)
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
