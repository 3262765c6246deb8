package main

import "fmt"

// methodology is the report's account of how each row is measured.
const methodology = `- **Peers are started by the benchmark**, on loopback ports of their own with configurations written into a temporary directory, and stopped at the end (also on failure or Ctrl-C). Missing Debian packages are installed first. No peer is tuned down; where a default is changed, it is raised to the load the row puts on it (below).
- **Sandbox ready.** Bare bwrap replays, with ` + "`true`" + ` as the command, the exact option list this sandboxd handed bwrap (captured once through a wrapper given to ` + "`serve --bwrap`" + `), less the info and user-namespace block descriptors that only sandboxd's identity-map step uses; the two mount tables are compared. sandboxd is timed from the start of ` + "`sandboxd serve --host --listen 127.0.0.1:0`" + ` on a fresh harness dir to the creation of its control socket (inotify; the benchmark does not poll while the daemon starts), then stopped with SIGTERM.
- **SSH rows.** OpenSSH's sshd runs with a generated config: its own ed25519 host key, ` + "`UsePAM no`" + `, the same agent key authorized for root, ` + "`MaxSessions 64`" + ` and ` + "`MaxStartups 64`" + ` (sandboxd's own limits; the defaults 10 and 10:30:100 would refuse the concurrency rows). Both servers are measured by the same golang.org/x/crypto/ssh client with its default algorithms; both run ` + "`bash -c CMD`" + ` for an exec. The round trip is one session (open, exec, exit-status, close) on an established connection; pairs alternate exec by exec.
- **` + "`sandboxd exec`" + `** is the CLI's wall time (control socket, the daemon's fork that joins the sandbox and becomes the command, exit status). The bare chain is ` + "`nsenter --target HOLDER <the holder's namespaces> -- setpriv --reuid=0 --regid=0 --clear-groups --bounding-set=<Docker's default less CAP_NET_RAW> --inh-caps=-all -- env -i PATH=… HOME=/root true`" + ` into the same holder. ` + "`docker exec`" + ` runs in a container of ` + "`images/base.sh bookworm`" + ` started once with ` + "`--network none`" + `. The three alternate.
- **Stream.** One exec of ` + "`head -c SIZE /dev/zero`" + ` per sample on an open connection; the Go client discards the stdout through a 256 KiB buffer. A second row repeats it with OpenSSH's ` + "`ssh`" + ` client (` + "`-c aes128-gcm@openssh.com`" + `, the cipher the Go client negotiates; a connection per sample), because the Go client is the slowest party and can set the pace for both servers.
- **SFTP.** OpenSSH's ` + "`sftp -b`" + ` client (` + "`-c aes128-gcm@openssh.com`" + `, a connection per sample) puts and gets a file of random bytes through the main daemon: the sftp subsystem (sandboxd's own server, pkg/sftpd) against ` + "`sftp -s /usr/lib/openssh/sftp-server`" + `, the image's OpenSSH server started by an exec request and joined as the agent like any session, so that the daemon, the SSH transport and the relay are the same on both sides. Both servers answer limits@openssh.com (sandboxd's in pkg/sftpd, in front of pkg/sftp), so the client moves 255 KiB per request to either.
- **pty sessions.** A third side with no server — as many local ptys, typed into by the benchmark — gives the floor this machine sets. Each session is its own connection (as many ` + "`ssh -tt`" + ` clients would be) with a pty running ` + "`cat >/dev/null`" + `; the key typed is echoed by the pty's line discipline, so the latency is the relay's: client → SSH → daemon → pty → daemon → SSH → client. Every session types about 10 keys a second (uniform 50–150 ms gaps) and waits for each echo. The benchmark's own client shares the two cores with the server it measures.
- **Egress.** Upstreams (an HTTP server, a byte-stream server, an echo server) run on the substrate's loopback. The client is this benchmark re-executed, the same code for all four sides, timing itself (process start and the join are not counted): direct, tinyproxy and squid are reached from the substrate; sandboxd's proxy listens only inside the sandbox, so its client runs there through ` + "`sandboxd exec`" + ` and talks to 127.0.0.1:3128 in the sandbox's network namespace. Every side thus has the same two loopback hops (client → proxy → upstream) but direct. sandboxd's policy is the default ` + "`public`" + ` with ` + "`--egress-allow-cidr 127.0.0.0/8`" + ` (its guard refuses loopback otherwise); tinyproxy runs Debian's default configuration on its own port with ` + "`MaxClients 256`" + ` (Debian's 100 would refuse the 100-tunnel row); squid runs its defaults with ` + "`http_access allow all`" + ` and ` + "`cache deny all`" + ` (nothing here is worth caching, and a cache hit would not be proxying), access logs on for all three. CONNECT asks the stream server for SIZE bytes through the tunnel; plain HTTP is a GET in absolute form; small requests are sequential GETs of two bytes on one keep-alive connection after 20 unmeasured ones (p50 and p99 per run, median over runs).
- **Caught.** The sandbox's rules send every outbound connection to sandboxd's transparent listener, but never one to the substrate's loopback, so these upstreams (byte stream, echo) sit on a test host in a network namespace of the bench's own (` + "`10.215.0.2`" + `, one veth pair), and a daemon of its own opens that address with ` + "`--egress-allow-cidr`" + `. The same client runs on three sides: direct from the substrate, inside the sandbox through the explicit proxy's CONNECT, and inside the sandbox dialling the host itself (caught). Time to first byte is from before the dial (and the CONNECT) to the first echoed byte, per connection, five unmeasured; the concurrency rows open 100 connections and bounce 64 bytes through each in a closed loop.
- **Grade.** A task directory with a one-line ` + "`tests/test.sh`" + ` (` + "`echo 1 > $DIR/reward.txt`" + `) served by its own ` + "`serve --task`" + `; ` + "`sandboxd grade --json`" + ` (CLI wall time) against running the script directly with DIR pointing at a temporary directory.
- **Scaling.** n workers each run ` + "`true`" + ` in a loop over ceil(n/16) connections opened beforehand (well under both servers' limit of 64 sessions per connection: a server frees a slot only once the client has answered the channel close, so a busy server counts more sessions than the client has open; a refusal is retried after 20 ms, its wait counted, and the number of refusals reported), all starting together; the figure is the p50/p99 of every exec. Proxy scaling opens n tunnels through each side to an echo server and bounces 64 bytes through each in a closed loop.
`

// The explanations below come from profiling this code base on this
// machine (perf, system-wide and per process, on builds of the same source
// without -s -w; strace; a scratch worktree for the A/B builds). They are
// printed only for a row that misses its target in the run at hand, with
// that run's numbers where they matter.

// goStartCost is shared by the exec rows.
const goStartCost = "History of the exec path, from profiles on this machine: in a system-wide perf profile of 200 SSH execs of `true` at load ~2, when nsenter joined the sandbox and a fresh start of the sandboxd binary did the enter step, that enter step was half of the CPU an exec cost on the server side (51%; bash 17%, nsenter 15%, the daemon 16%): Go's all-threads credential calls (syscall.Setgroups and the like stop the world and signal every thread), package inits (regexps compiled at init: 0.6 ms) and, most of all, the Go runtime's own start (about 4 ms of CPU per start of this binary; `/bin/true` 0.6 ms). A/B in a scratch worktree: CPU per exec 9.8–11.2 ms → 9.2–10.0 (per-thread calls) → 8.3–8.6 ms (lazy regexps). Since then the daemon's own fork joins the namespaces and does the enter step with raw system calls before it execs the command: no nsenter, no second Go start. "

// missExplanations says, for a row that misses its target, what profiling
// found.
var missExplanations = map[string]func(b *bench) string{
	"ready": func(b *bench) string {
		h, e, c := b.phase("sandbox ready"), b.phase("network ready"), b.phase("serving")
		return fmt.Sprintf("serve's own log splits its start: the holder is ready at %s ms — the 64 OS threads serve makes before an agent can take the pids (package spare; made by goroutines locked to them, about 1.5 ms, where waiting for the runtime's monitor to hand each blocked P on took 12 ms and more here), a `bwrap --version` probe on every start, bwrap itself, the identity map written from outside, the readiness line — then the network takes %s ms more: the TCP listeners, the resolver's UDP socket and the two netlink sockets are made by forked copies that join the sandbox's user and network namespaces and make them with raw system calls, without an exec (pkg/join Sockets; each was a start of the whole binary, and the network took 27 ms here before); the nftables rules are still applied by a helper that is a start of the whole binary (Go runtime and every package's init, see the exec rows), as google/nftables dials its own netlink socket and the daemon cannot join the sandbox's network namespace; SSH keys and the control socket bring it to %s ms. Under 2× would leave serve 7 ms on top of bwrap for its own Go start, the bwrap probe, the identity map, the rules and the keys. The reaper reads its own children only on a child's exit, not every process's /proc/PID/stat, which it once scanned.",
			fmtNum(h), fmtNum(e-h), fmtNum(c))
	},
	"exec-nsenter": func(b *bench) string {
		return "The bare chain is four small C programs; `sandboxd exec` is a Go process start (the CLI), the control socket round trip, the daemon's fork and the relay. " + goStartCost
	},
	"ssh-rtt": func(b *bench) string {
		return "Both servers fork and exec the same shell for each command, so 1× is the floor of this row (an earlier target of 0.1× took a machine's ~/.bashrc for sshd's own cost). sandboxd's exec is a fork of the daemon that joins (7 setns and a second fork) and execs bash. " + goStartCost
	},
	"ssh-conn": func(b *bench) string {
		return "The connection itself (key exchange: mlkem768x25519 against sshd's curve25519; public-key auth) is cheaper on sandboxd than sshd's re-exec per connection; what is left is the one exec, see the round-trip row."
	},
	"ssh-stream": func(b *bench) string {
		return "What the daemon pays per GiB, from perf profiles of the daemon during the stream (the CPU time of each server's process tree moves far less with the load than the rate does). (1) The session's records (internal/records) keep each stream of an exec on disk up to MaxStreamFile (64 MiB): before that bound, the daemon wrote the whole stream a second time (records.tee.Write was 43% of its CPU); and the record's tail of the stream (internal/tail) reallocated its buffer on every write, which put the garbage collector at 12% of the daemon's CPU, until it kept one buffer. With both, AES-GCM sealing is the daemon's largest cost (28%), then the scheduler's switches between the pipe's reader and the transport. (2) x/crypto/ssh writes every AES-GCM packet as two write(2) calls, the transport's 4 KiB bufio.Writer flushed full and then the rest; a connection wrapper (packetConn, pkg/sshd) hands both to the kernel in one writev(2), only where a 4096-byte write is never a packet's end (docs/failures.md#a-packets-end-is-never-held-back): strace over 64 MiB, 5480 socket writes for 2646 pipe reads before, 7756 writev for 7742 pipe reads and no other socket write after; the tree's CPU per GiB went from 0.65–0.67 s to 0.56–0.60 s (records bypassed in both builds). The upstream change that would make the wrapper unnecessary: gcmCipher.writeCipherPacket sealing into one buffer that begins with the length (one Write per packet), or a transport bufio.Writer as large as the largest packet."
	},
	"ssh-stream-openssh": func(b *bench) string {
		return "Same causes as the row above; with OpenSSH's client the Go client's own per-packet cost is out of the picture, and each sample includes a connection set-up (about 0.1 s for sshd, 0.03 s for sandboxd)."
	},
	"sftp-upload": func(b *bench) string {
		return "The daemon, the SSH transport, the relay and the request size (255 KiB, limits@openssh.com) are the same on both sides; what differs is the server. perf stat of each server alone moving 1 GiB through pipes (sftp -D, a cat on each side): OpenSSH's sftp-server 0.63-0.93 s of CPU up and 0.60-0.98 s down, with 150,000 syscalls per GiB up (16 KiB reads, each after a poll); sandboxd's 0.54-0.65 s up and 0.14-0.16 s down, as it splices a READ's data from the file to the channel's pipe and a WRITE's from the pipe to the file (pkg/sftpd files.go). The server is a small part of the machine's work here (the daemon's transport, ssh and sftp are most of it), so the rate moves less than the server's CPU, and an upload's ratio still varies by about 0.1 between runs on this two-core machine."
	},
	"pty-p99": func(b *bench) string {
		r := b.result("pty-p99")
		return fmt.Sprintf("Both servers miss 5 ms here (sshd %s ms, sandboxd %s ms), while local ptys typed into by the same benchmark with no server stay far below it (the row's note): the tail is time spent waiting for a CPU. `perf sched record -a` for 8 s of a sandboxd round with 200 sessions: the daemon's threads waited for a CPU 0.23 ms on average and up to 78 ms at worst, the benchmark's client up to 15 ms, while another test binary took 7.3 of the 16 CPU-seconds in that window (load %s before this run, %s after). With 200 encrypted connections served and 200 driven by the benchmark on the same two cores, a 5 ms p99 needs an idle machine; sandboxd's p50 and p99 are at or below sshd's.",
			fmtNum(r.peerV), fmtNum(r.ours), b.machine.loadBefore, b.machine.loadAfter)
	},
	"pty-rss": func(b *bench) string {
		return "No profile recorded: the daemon's heap grows with sessions (per session: an SSH connection's buffers, the relay's 64 KiB read buffer, the recording)."
	},
	"egress-connect": func(b *bench) string {
		return "CONNECT relays with io.Copy between the two TCP connections, which Go turns into splice(2): the proxy itself is not copying. What is left is two loopback hops against one (a bare splice proxy in Go measured 0.40–0.56× direct here, issue 4) and this machine's load."
	},
	"egress-plain": func(b *bench) string {
		return "A body of known length is spliced between the two TCP connections once the bytes the reader already holds are passed on (spliceBody, pkg/egress/forward.go), as CONNECT relays a tunnel; a chunked body goes through CopyBody's pooled 32 KiB buffer (pkg/egress/internal/http1). What is left is two loopback hops against one and the parsing of each request and response head. No profile of the current build is recorded for this row."
	},
	"egress-small-p50": func(b *bench) string {
		return "See the p99 row."
	},
	"egress-small-p99": func(b *bench) string {
		return "p50 is ahead of both peers. The tail was the daemon's garbage collector while CopyBody allocated a fresh 32 KiB buffer for every response body (67 collections in 6000 requests with GODEBUG=gctrace=1); its buffers are pooled now (pkg/egress/internal/http1, bodyBuffers). The tail that remains has not been profiled again; the decision and close audit records written per request are what each request still allocates."
	},
}

// phase is serve's median time to a start-up step, in ms.
func (b *bench) phase(msg string) float64 { return b.readyPhases[msg].median() }

// result finds a row of the main table by id.
func (b *bench) result(id string) *result {
	for _, r := range b.results {
		if r.id == id {
			return r
		}
	}
	return &result{}
}
