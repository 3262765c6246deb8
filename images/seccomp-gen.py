#!/usr/bin/env python3
"""images/seccomp-gen.py — derive images/seccomp.json from Docker's default profile.

    images/seccomp-gen.py DOCKER_DEFAULT_JSON [OUT]        (OUT defaults to stdout)
    images/seccomp-gen.py --check DOCKER_DEFAULT_JSON images/seccomp.json

DOCKER_DEFAULT_JSON is moby's profiles/seccomp/default.json. The one our profile
was made from is Docker 20.10.24's, as Debian ships it:

    apt-get download golang-github-docker-docker-dev
    dpkg-deb -x golang-github-docker-docker-dev_*.deb x
    x/usr/share/gocode/src/github.com/docker/docker/profiles/seccomp/default.json

Every change is an edit of the default, made here and nowhere else, and each
changed entry says why in its "comment". What the sandbox needs beyond the
default, for a container WITHOUT CAP_SYS_ADMIN (Docker's default capability
set), and nothing more:

  * clone   with namespace flags (bwrap creates user, mount, pid, ipc, uts, net
            namespaces with clone(2)). The default allows clone only without
            them (a masked compare) unless CAP_SYS_ADMIN.
  * unshare (bwrap: the cgroup namespace, --disable-userns's nested user
            namespace; nsenter-based helpers), setns (nsenter joins the
            sandbox), mount and umount2 (bwrap builds the root), pivot_root
            (bwrap switches root; the default denies it even with CAP_SYS_ADMIN).

Everything else stays as the default has it: clone3 still fails with ENOSYS
(callers fall back to clone(2), whose flags seccomp can inspect); the new mount
API (fsopen, fsmount, move_mount, open_tree, mount_setattr), sethostname,
setdomainname, bpf, perf_event_open, kexec, keyctl/add_key/request_key,
ptrace's, personality's and every other restriction are untouched. The kernel
still checks capabilities on all of these calls: the profile only stops seccomp
from refusing them before the kernel is asked.
"""
import copy
import json
import sys

ADDED = ["clone", "mount", "pivot_root", "setns", "umount2", "unshare"]

COMMENT_NS = (
    "sandboxd: allowed without CAP_SYS_ADMIN (Docker's default allows these only "
    "with it). bwrap creates its namespaces with clone(2) and unshare(2) and builds "
    "the sandbox root with mount/umount2/pivot_root; nsenter joins it with setns. "
    "The kernel still checks capabilities; clone3 keeps the default's ENOSYS."
)
COMMENT_PIVOT = (
    "sandboxd: pivot_root is not in Docker's default profile at all (denied even "
    "with CAP_SYS_ADMIN); bwrap needs it to switch to the sandbox root. The kernel "
    "allows it only to a holder of CAP_SYS_ADMIN over the mount namespace."
)


def derive(default):
    prof = copy.deepcopy(default)
    out = []
    for entry in prof["syscalls"]:
        names = entry["names"]
        excl = entry.get("excludes") or {}
        # The default's "clone without namespace flags unless CAP_SYS_ADMIN"
        # (two entries: argument 0, and argument 1 on s390) becomes "clone
        # unless CAP_SYS_ADMIN" — with CAP_SYS_ADMIN the default already allows
        # clone outright, so the two cases stay exclusive.
        if names == ["clone"] and entry.get("args") and "CAP_SYS_ADMIN" in excl.get("caps", []):
            continue
        out.append(entry)
        if (entry.get("includes") or {}).get("caps") == ["CAP_SYS_ADMIN"] and "clone" in names:
            # Right after the CAP_SYS_ADMIN group, its mirror image for the
            # containers without it, limited to what the sandbox uses.
            out.append(
                {
                    "names": [n for n in ADDED if n != "pivot_root"],
                    "action": "SCMP_ACT_ALLOW",
                    "args": [],
                    "comment": COMMENT_NS,
                    "includes": {},
                    "excludes": {"caps": ["CAP_SYS_ADMIN"]},
                }
            )
            out.append(
                {
                    "names": ["pivot_root"],
                    "action": "SCMP_ACT_ALLOW",
                    "args": [],
                    "comment": COMMENT_PIVOT,
                    "includes": {},
                    "excludes": {},
                }
            )
    prof["syscalls"] = out
    check(default, prof)
    return prof


def allowed_names(prof, caps, arch="amd64"):
    """Names allowed (unconditionally or with arguments) for a container with caps."""
    res = {}
    for e in prof["syscalls"]:
        inc, exc = e.get("includes") or {}, e.get("excludes") or {}
        if inc.get("caps") and not set(inc["caps"]) <= caps:
            continue
        if exc.get("caps") and set(exc["caps"]) & caps:
            continue
        if inc.get("arches") and arch not in inc["arches"]:
            continue
        if exc.get("arches") and arch in exc["arches"]:
            continue
        for n in e["names"]:
            res.setdefault(n, []).append((e["action"], bool(e.get("args"))))
    return res


def check(default, prof):
    """The only differences for a default-capability container are ADDED."""
    docker_caps = {
        "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
        "CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
        "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
    }
    for caps in (docker_caps, docker_caps | {"CAP_SYS_ADMIN"}):
        a, b = allowed_names(default, caps), allowed_names(prof, caps)
        changed = sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
        want = sorted(ADDED) if "CAP_SYS_ADMIN" not in caps else ["pivot_root"]
        if changed != want:
            sys.exit(f"seccomp-gen: unexpected difference {changed}, want {want}")


def main(argv):
    if argv[:1] == ["--check"]:
        default = json.load(open(argv[1]))
        want = json.dumps(derive(default), indent=2) + "\n"
        have = open(argv[2]).read()
        if want != have:
            sys.exit(f"{argv[2]} is not what seccomp-gen.py derives from {argv[1]}")
        print("seccomp.json matches its derivation", file=sys.stderr)
        return
    if not argv:
        sys.exit(__doc__)
    prof = derive(json.load(open(argv[0])))
    text = json.dumps(prof, indent=2) + "\n"
    if len(argv) > 1:
        open(argv[1], "w").write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main(sys.argv[1:])
