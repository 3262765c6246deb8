"""Move files in and out of sandboxd with paramiko: SFTP, and the legacy
scp protocol through the scp module (python3-scp), which speaks only that.

Usage: files_paramiko.py HOST PORT KEYFILE SRC BACKDIR
Uploads SRC as paramiko-sftp.bin and paramiko-scp.bin in the agent's
working directory and downloads each into BACKDIR; the Go test compares
the checksums. Then it checks links: "link" must read back as a symlink,
and "escape" (a link out of the sandbox's view) must not be followed.
Prints one "ok NAME" line per check.
"""
import errno
import os
import stat
import sys

import paramiko
from scp import SCPClient, SCPException

host, port, keyfile, src, back = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
client = paramiko.SSHClient()
client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
client.connect(host, port=port, username="agent",
               pkey=paramiko.Ed25519Key.from_private_key_file(keyfile),
               look_for_keys=False, allow_agent=False, timeout=10)


def ok(name):
    print("ok", name, flush=True)


sftp = client.open_sftp()
sftp.put(src, "paramiko-sftp.bin")
sftp.get("paramiko-sftp.bin", os.path.join(back, "paramiko-sftp.bin"))
ok("sftp-put-get")

with SCPClient(client.get_transport()) as scp:
    scp.put(src, "paramiko-scp.bin")
    scp.get("paramiko-scp.bin", os.path.join(back, "paramiko-scp.bin"))
ok("scp-put-get")

sftp.symlink("paramiko-sftp.bin", "link")
st = sftp.lstat("link")
assert stat.S_ISLNK(st.st_mode), oct(st.st_mode)
assert sftp.readlink("link") == "paramiko-sftp.bin", sftp.readlink("link")
ok("symlink-lstat-readlink")

assert stat.S_ISLNK(sftp.lstat("escape").st_mode)
try:
    sftp.stat("escape")
    raise AssertionError("stat followed escape out of the sandbox's view")
except IOError as e:
    assert e.errno == errno.ENOENT, e
try:
    sftp.open("escape").read()
    raise AssertionError("read escape out of the sandbox's view")
except IOError as e:
    assert e.errno == errno.ENOENT, e
with SCPClient(client.get_transport()) as scp:
    try:
        scp.get("escape", os.path.join(back, "escaped"))
        raise AssertionError("scp followed escape out of the sandbox's view")
    except SCPException as e:
        assert "No such file" in str(e), e
assert not os.path.exists(os.path.join(back, "escaped"))
ok("escape-not-followed")
client.close()
