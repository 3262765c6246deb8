#!/usr/bin/env bash
# make demo: serve a sandbox on this machine and show, through `sandboxd exec`,
# what an agent sees — then stop cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=bin/sandboxd
harness=/media/sandboxd-demo
log=$(mktemp /tmp/sandboxd-demo.XXXX.log)

$bin serve --harness-dir "$harness" --host --log-format text >"$log" 2>&1 &
serve=$!
trap 'kill $serve 2>/dev/null; wait $serve 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -S "$harness/run/control.sock" ] && break; sleep 0.05; done
export SANDBOXD_HARNESS_DIR=$harness

show() { printf '\n$ sandboxd exec -- %s\n' "$*"; $bin exec -- "$@" || true; }
echo "sandbox pid $($bin status | sed -n 's/.*"pid": \([0-9]*\).*/\1/p' | head -1) (bwrap $(bwrap --version | cut -d' ' -f2))"
show id
show sh -c 'ls -d /tests /media/sandboxd-demo 2>&1; ls -A /logs/verifier | wc -l'
show sh -c 'ip -brief addr 2>/dev/null || cat /proc/net/dev'
show sh -c 'test -w /proc/sys/kernel/core_pattern && echo core_pattern writable || echo core_pattern read-only'
show sh -c 'unshare -U true 2>&1 || true'
show sh -c 'nohup sleep 300 >/dev/null 2>&1 & echo started a background server'
show pgrep -a sleep
$bin stop
wait $serve
trap - EXIT
echo
echo "stopped; nothing of the sandbox is left: $(pgrep -c -f 'sleep 300' || true) sleeps remain"
