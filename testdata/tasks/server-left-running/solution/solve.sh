#!/bin/bash
# Oracle: a small threaded line server, started in the background with its
# output away from the session, so the session can end while it runs on.
set -euo pipefail
cat > console.py <<'PY'
import socketserver

class Console(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            self.wfile.write(b"PONG " + line.rstrip(b"\r\n") + b"\n")
            self.wfile.flush()

class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

Server(("127.0.0.1", 6665), Console).serve_forever()
PY
nohup /usr/bin/python3 console.py </dev/null >/dev/null 2>&1 &
for _ in $(seq 100); do
  if /usr/bin/python3 -c 'import socket; socket.create_connection(("127.0.0.1", 6665), timeout=1)' 2>/dev/null; then
    echo "console is up"
    exit 0
  fi
  sleep 0.1
done
echo "console did not come up" >&2
exit 1
