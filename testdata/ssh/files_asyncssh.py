"""Move files and trees in and out of sandboxd with asyncssh: SFTP, and
its scp(), which speaks the legacy scp protocol.

Usage: files_asyncssh.py HOST PORT KEYFILE SRC TREE BACKDIR
Uploads SRC as asyncssh-sftp.bin and asyncssh-scp.bin, and the directory
TREE as tree-asyncssh (recursively, modes and times kept, symlinks
followed), in the agent's working directory; downloads each into BACKDIR.
The Go test compares them. Prints one "ok NAME" line per check.
"""
import asyncio
import os
import sys

import asyncssh

host, port, keyfile, src, tree, back = sys.argv[1], int(sys.argv[2]), *sys.argv[3:7]


def ok(name):
    print("ok", name, flush=True)


async def main():
    async with asyncssh.connect(host, port=port, username="agent", client_keys=[keyfile],
                                known_hosts=None, agent_path=None) as conn:
        async with conn.start_sftp_client() as sftp:
            await sftp.put(src, "asyncssh-sftp.bin")
            await sftp.get("asyncssh-sftp.bin", os.path.join(back, "asyncssh-sftp.bin"))
            ok("sftp-put-get")
            await sftp.put(tree, "tree-asyncssh", recurse=True, preserve=True, follow_symlinks=True)
            await sftp.get("tree-asyncssh", os.path.join(back, "tree-asyncssh"), recurse=True, preserve=True,
                           follow_symlinks=True)
            ok("sftp-tree")
            # The standard argument order, which asyncssh sends unless the
            # server's banner says OpenSSH.
            await sftp.symlink("asyncssh-sftp.bin", "asyncssh-link")
            assert (await sftp.lstat("asyncssh-link")).type == asyncssh.FILEXFER_TYPE_SYMLINK
            assert await sftp.readlink("asyncssh-link") == "asyncssh-sftp.bin"
            ok("symlink-lstat-readlink")
            vfs = await sftp.statvfs(".")
            assert vfs.bsize > 0 and vfs.blocks > 0, vfs
            ok("statvfs")
        await asyncssh.scp(src, (conn, "asyncssh-scp.bin"))
        await asyncssh.scp((conn, "asyncssh-scp.bin"), os.path.join(back, "asyncssh-scp.bin"))
        ok("scp-put-get")


asyncio.run(main())
