package daemon

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/pkg/egress"
)

// Real clients inside the sandbox, through the proxy, against upstreams on
// the substrate's loopback (opened deliberately with AllowCIDRs and named by
// a fake resolver): git over HTTPS, pip, apt, and a Go program, told of the
// proxy by --proxy-env.

func allowlisted(t *testing.T, names ...string) *served {
	res := fakeResolver{}
	for _, n := range names {
		res[n] = "127.0.0.1"
	}
	return serveForTest(t, config.Config{
		Network:  config.Network{Agent: egress.Policy{Mode: egress.Allowlist, AllowedHosts: names, AllowCIDRs: loopbackOnly}, ProxyEnv: true},
		Resolver: res,
	})
}

func TestClients_GitCloneOverHTTPSThroughProxy(t *testing.T) {
	requireTool(t, "git")
	root := t.TempDir()
	repo := filepath.Join(root, "repo.git")
	work := filepath.Join(root, "work")
	for _, args := range [][]string{
		{"init", "-q", "--bare", repo},
		{"init", "-q", work},
		{"-C", work, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "first"},
		{"-C", work, "push", "-q", repo, "HEAD:refs/heads/main"},
		{"-C", repo, "symbolic-ref", "HEAD", "refs/heads/main"},
	} {
		out, err := exec.Command("git", args...).CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
	}
	srv := httptest.NewTLSServer(&cgi.Handler{
		Path: "/usr/lib/git-core/git-http-backend",
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
	})
	defer srv.Close()
	port := srv.Listener.Addr().String()[strings.LastIndexByte(srv.Listener.Addr().String(), ':')+1:]
	s := allowlisted(t, "git.test")
	r := s.sh(t, fmt.Sprintf("cd /tmp && rm -rf clone-%[1]s && git -c http.sslVerify=false clone -q https://git.test:%[1]s/repo.git clone-%[1]s && git -C clone-%[1]s log --format=%%s && rm -rf clone-%[1]s", port))
	require.Equal(t, 0, r.exit.Code, r.stderr)
	assert.Equal(t, "first\n", r.stdout)
}

func TestClients_PipDownloadFromLocalIndex(t *testing.T) {
	wheel := minimalWheel(t, "sbxdemo", "1.0")
	sum := sha256.Sum256(wheel)
	name := "sbxdemo-1.0-py3-none-any.whl"
	mux := http.NewServeMux()
	mux.HandleFunc("/simple/sbxdemo/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<html><body><a href="/files/%s#sha256=%x">%s</a></body></html>`, name, sum, name)
	})
	mux.HandleFunc("/files/"+name, func(w http.ResponseWriter, r *http.Request) { w.Write(wheel) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	port := srv.Listener.Addr().String()[strings.LastIndexByte(srv.Listener.Addr().String(), ':')+1:]
	s := allowlisted(t, "pypi.test")
	r := s.sh(t, fmt.Sprintf("d=$(mktemp -d) && /usr/bin/python3 -m pip download -q --no-deps --disable-pip-version-check --no-cache-dir --index-url http://pypi.test:%[1]s/simple/ --trusted-host pypi.test:%[1]s -d $d sbxdemo && ls $d && rm -rf $d", port))
	require.Equal(t, 0, r.exit.Code, r.stderr)
	assert.Equal(t, name+"\n", r.stdout)
}

func TestClients_AptUpdateFromLocalRepository(t *testing.T) {
	requireTool(t, "apt-get")
	if _, err := os.Stat("/etc/apt/apt.conf.d"); err != nil {
		t.Fatal("this test needs apt")
	}
	repo := t.TempDir()
	packages := []byte("Package: sbxdemo\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@t>\nFilename: pool/sbxdemo_1.0_all.deb\nSize: 1\nDescription: demo\n\n")
	require.NoError(t, os.WriteFile(filepath.Join(repo, "Packages"), packages, 0o644))
	sum := sha256.Sum256(packages)
	release := fmt.Sprintf("Origin: sbx\nLabel: sbx\nSuite: ./\nCodename: sbx\nDate: Sun, 29 Nov 2026 00:00:00 UTC\nSHA256:\n %x %d Packages\n", sum, len(packages))
	require.NoError(t, os.WriteFile(filepath.Join(repo, "Release"), []byte(release), 0o644))
	srv := httptest.NewServer(http.FileServer(http.Dir(repo)))
	defer srv.Close()
	port := srv.Listener.Addr().String()[strings.LastIndexByte(srv.Listener.Addr().String(), ':')+1:]
	s := allowlisted(t, "apt.test")
	// apt finds the proxy in the agent's own apt.conf.d (a data bind), and
	// keeps its lists in a scratch dir so the shared /var/lib/apt is untouched.
	r := s.sh(t, fmt.Sprintf(`set -e
d=$(mktemp -d); mkdir -p $d/lists/partial $d/cache/archives/partial
echo "deb [trusted=yes] http://apt.test:%s/ ./" > $d/sources.list
grep -h Proxy /etc/apt/apt.conf.d/00proxy | head -1
apt-get -q -o Dir::Etc::SourceList=$d/sources.list -o Dir::Etc::SourceParts=/nonexistent -o Dir::State::Lists=$d/lists -o Dir::Cache=$d/cache -o Debug::NoLocking=1 update >/dev/null
apt-cache -o Dir::Etc::SourceList=$d/sources.list -o Dir::Etc::SourceParts=/nonexistent -o Dir::State::Lists=$d/lists -o Dir::Cache=$d/cache show sbxdemo | grep ^Package
rm -rf $d`, port))
	require.Equal(t, 0, r.exit.Code, r.stderr)
	assert.Equal(t, "Acquire::http::Proxy \"http://127.0.0.1:3128\";\nPackage: sbxdemo\n", r.stdout)
	_, err := os.Stat("/etc/apt/apt.conf.d/00proxy")
	assert.True(t, os.IsNotExist(err), "the apt proxy configuration exists in the agent's view only")
}

func TestClients_GoProgramWithProxyFromEnvironment(t *testing.T) {
	requireTool(t, "go")
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(`package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
)

func main() {
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment}}
	resp, err := c.Get(os.Args[1])
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	b, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(b))
}
`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module fetch\n\ngo 1.22\n"), 0o644))
	bin := filepath.Join(dir, "fetch")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))
	port := upstream(t, "via ProxyFromEnvironment")
	s := allowlisted(t, "go.test")
	r := s.exec(t, controlReq(bin, fmt.Sprintf("http://go.test:%d/", port)), "")
	require.Equal(t, 0, r.exit.Code, r.stdout+r.stderr)
	assert.Equal(t, "200 via ProxyFromEnvironment\n", r.stdout)
}

// minimalWheel is a valid, empty wheel: enough for pip to download and check it.
func minimalWheel(t *testing.T, name, version string) []byte {
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	dist := fmt.Sprintf("%s-%s.dist-info/", name, version)
	files := map[string]string{
		dist + "METADATA": fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\n", name, version),
		dist + "WHEEL":    "Wheel-Version: 1.0\nGenerator: sandboxd-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
	}
	var record strings.Builder
	for path, content := range files {
		w, err := z.Create(path)
		require.NoError(t, err)
		w.Write([]byte(content))
		fmt.Fprintf(&record, "%s,,\n", path)
	}
	fmt.Fprintf(&record, "%sRECORD,,\n", dist)
	w, err := z.Create(dist + "RECORD")
	require.NoError(t, err)
	w.Write([]byte(record.String()))
	require.NoError(t, z.Close())
	return buf.Bytes()
}
