#!/bin/bash
set -u
fail() { echo "FAIL: $*"; echo 0 > /logs/verifier/reward.txt; exit 0; }
leak() { echo "NETWORK LEAK: $*"; exit 1; }   # no reward: sandboxd is at fault

# Nothing outside answers, and nobody offered a proxy.
[ -z "${http_proxy:-}${https_proxy:-}${HTTP_PROXY:-}${HTTPS_PROXY:-}" ] || leak "proxy variables are set"
ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\n' ' ')
[ "$ifaces" = "lo " ] || leak "network interfaces besides loopback: $ifaces"
if curl -s --noproxy '*' -m 3 -o /dev/null http://1.1.1.1/; then leak "reached 1.1.1.1"; fi

# Root in the sandbox's user namespace can still hand files to other users.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/d"; echo x > "$tmp/d/f"
chown 1000:1000 "$tmp/d/f" || { echo "chown failed"; exit 1; }
tar -C "$tmp" -cf "$tmp/a.tar" d && rm -rf "$tmp/d" && tar -C "$tmp" -xpf "$tmp/a.tar" || { echo "tar failed"; exit 1; }
[ "$(stat -c %u:%g "$tmp/d/f")" = 1000:1000 ] || { echo "untar lost the owner"; exit 1; }

want=$(printf '%s' sandboxd | sha256sum | cut -d' ' -f1)
got=$(curl -fsS --noproxy '*' -m 5 http://127.0.0.1:8000/answer 2>&1) || fail "no answer on 127.0.0.1:8000/answer ($got)"
[ "$got" = "$want" ] || fail "wrong answer: $got"
echo "PASS: the agent's loopback service answered, nothing outside did"
echo 1 > /logs/verifier/reward.txt
