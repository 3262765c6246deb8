"""Drive sandboxd's SSH server the way asyncio harnesses do, with asyncssh.

Usage: asyncssh_client.py HOST PORT KEYFILE
Prints one "ok NAME" line per check; an assertion failure exits non-zero
with the reason on stderr.
"""
import asyncio
import sys

import asyncssh

host, port, keyfile = sys.argv[1], int(sys.argv[2]), sys.argv[3]


def ok(name):
    print("ok", name, flush=True)


async def main():
    async with asyncssh.connect(host, port=port, username="agent", client_keys=[keyfile],
                                known_hosts=None, agent_path=None) as conn:
        for code in (0, 1, 7):
            r = await conn.run("echo out; echo err >&2; exit %d" % code, check=False)
            assert r.exit_status == code, r
            assert r.stdout == "out\n" and r.stderr == "err\n", r
        ok("exec-exit-status")

        r = await conn.run("kill -KILL $$", check=False)
        assert r.exit_signal is not None and r.exit_signal[0] == "KILL", r.exit_signal
        ok("exit-signal")

        r = await conn.run("wc -c; cat", input="x" * 100000, check=False)
        assert r.stdout.strip() == "100000", r.stdout
        assert r.exit_status == 0
        ok("stdin-heredoc")

        r = await conn.run("tty; stty size; echo $TERM", term_type="xterm-256color", term_size=(77, 19), check=False)
        lines = r.stdout.split("\r\n")
        assert lines[0].startswith("/dev/pts/"), lines
        assert lines[1] == "19 77", lines
        assert lines[2] == "xterm-256color", lines
        ok("pty")

        proc = await conn.create_process(
            "i=0; while [ $i -lt 60 ]; do stty size; i=$((i+1)); sleep 0.02; done",
            term_type="xterm", term_size=(80, 24))
        seen = []
        while True:
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            if not line:
                break
            seen.append(line.strip())
            if len(seen) == 10:
                proc.change_terminal_size(132, 43)
        await proc.wait()
        assert proc.exit_status == 0
        assert "24 80" in seen and "43 132" in seen, seen
        assert len(seen) == 60, len(seen)
        ok("resize-during-output")

        proc = await conn.create_process(term_type="xterm", term_size=(100, 30))
        proc.stdin.write("echo marker-$((6*7)); exit 5\n")
        out = ""
        while "marker-42" not in out:
            chunk = await asyncio.wait_for(proc.stdout.read(4096), 30)
            if not chunk:
                break
            out += chunk
        await asyncio.wait_for(proc.wait(), 30)
        assert "marker-42" in out, out
        assert proc.exit_status == 5, proc.exit_status
        ok("shell")


asyncio.run(main())
