#!/bin/bash
# Oracle: compute the digest, serve it with python's http.server.
set -euo pipefail
mkdir -p www
printf '%s' sandboxd | sha256sum | cut -d' ' -f1 | tr -d '\n' > www/answer
nohup python3 -m http.server 8000 --bind 127.0.0.1 --directory www </dev/null >/dev/null 2>&1 &
for _ in $(seq 100); do
  curl -fs --noproxy '*' -m 1 -o /dev/null http://127.0.0.1:8000/answer && exit 0
  sleep 0.1
done
echo "server did not come up" >&2
exit 1
