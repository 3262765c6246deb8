"""Drive sandboxd's SSH server the way Python harnesses do, with paramiko.

Usage: paramiko_client.py HOST PORT KEYFILE
Prints one "ok NAME" line per check; an assertion failure exits non-zero
with the reason on stderr.
"""
import sys
import time

import paramiko

host, port, keyfile = sys.argv[1], int(sys.argv[2]), sys.argv[3]
client = paramiko.SSHClient()
client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
client.connect(host, port=port, username="agent",
               pkey=paramiko.Ed25519Key.from_private_key_file(keyfile),
               look_for_keys=False, allow_agent=False, timeout=10)


def ok(name):
    print("ok", name, flush=True)


# exec and exit status
for code in (0, 1, 7):
    _, out, err = client.exec_command("echo out; echo err >&2; exit %d" % code)
    assert out.read() == b"out\n"
    assert err.read() == b"err\n"
    assert out.channel.recv_exit_status() == code, code
ok("exec-exit-status")

# death by signal: paramiko reports -1 for exit-signal
_, out, _ = client.exec_command("kill -TERM $$")
assert out.channel.recv_exit_status() == -1
ok("exit-signal")

# stdin heredoc: EOF must reach the command
stdin, out, _ = client.exec_command("wc -l; cat")
stdin.write("line\n" * 1000)
stdin.channel.shutdown_write()
assert out.read() == b"1000\n", "heredoc"
assert out.channel.recv_exit_status() == 0
ok("stdin-heredoc")

# pty with a size and TERM
chan = client.get_transport().open_session()
chan.get_pty(term="vt220", width=91, height=21)
chan.exec_command("tty; stty size; echo $TERM")
lines = chan.makefile("rb").read().decode().split("\r\n")
assert lines[0].startswith("/dev/pts/"), lines
assert lines[1] == "21 91", lines
assert lines[2] == "vt220", lines
assert chan.recv_exit_status() == 0
ok("pty")

# resize while the command prints
chan = client.get_transport().open_session()
chan.get_pty(term="xterm", width=80, height=24)
chan.exec_command("i=0; while [ $i -lt 60 ]; do stty size; i=$((i+1)); sleep 0.02; done")
buf = b""
resized = False
start = time.time()
while True:
    if chan.recv_ready():
        buf += chan.recv(65536)
    if not resized and buf.count(b"\n") >= 10:
        chan.resize_pty(width=132, height=43)
        resized = True
    if chan.exit_status_ready() and not chan.recv_ready():
        break
    if time.time() - start > 30:
        raise AssertionError("resize test hung: %r" % buf[-200:])
    time.sleep(0.005)
while chan.recv_ready():
    buf += chan.recv(65536)
sizes = buf.decode().split("\r\n")
assert sizes.count("24 80") >= 10, sizes
assert "43 132" in sizes, sizes
assert len([s for s in sizes if s]) == 60, len(sizes)
assert chan.recv_exit_status() == 0
ok("resize-during-output")

# interactive shell through invoke_shell
shell = client.invoke_shell(term="xterm", width=100, height=30)
shell.send("echo marker-$((6*7)); exit 5\n")
buf = b""
start = time.time()
while not shell.exit_status_ready():
    if shell.recv_ready():
        buf += shell.recv(65536)
    if time.time() - start > 30:
        raise AssertionError("shell hung: %r" % buf)
    time.sleep(0.01)
while shell.recv_ready():
    buf += shell.recv(65536)
assert b"marker-42" in buf, buf
assert shell.recv_exit_status() == 5
ok("invoke-shell")

client.close()
