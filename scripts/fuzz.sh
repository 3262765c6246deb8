#!/usr/bin/env bash
# scripts/fuzz.sh DURATION [PATTERN]
#
# Runs every fuzz target in the repository for DURATION each (a Go duration:
# 10m for the figures in docs/security.md, 10s in CI), one after the other,
# and prints a summary line per target: executions, new corpus entries,
# and whether it failed. Crashers are written by `go test` to the package's
# testdata/fuzz/<Target>/ and must be committed with the fix.
#
# PATTERN (a grep -E regexp) limits the run to matching "package target" lines.
# Environment:
#   FUZZ_PARALLEL  workers per target (default: go test's, GOMAXPROCS)
#   FUZZ_LOG_DIR   keep each target's full output there (default: a temp dir)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 1 ]; then
  echo "usage: $0 DURATION [PATTERN]   (e.g. $0 10m, or $0 10s in CI)" >&2
  exit 2
fi
duration=$1
pattern=${2:-.}
parallel=()
if [ -n "${FUZZ_PARALLEL:-}" ]; then
  parallel=(-parallel "$FUZZ_PARALLEL")
fi
logs=${FUZZ_LOG_DIR:-$(mktemp -d /tmp/sandboxd-fuzz.XXXX)}
mkdir -p "$logs"

# Every package that holds a fuzz target, and its targets: `go test -list`
# prints the names, then "ok <package>".
targets=()
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  grep -lsq '^func Fuzz' "$dir"/*_test.go || continue
  while read -r name; do
    case $name in Fuzz*) targets+=("$pkg $name") ;; esac
  done < <(go test -list '^Fuzz' "$pkg")
done
selected=()
for t in "${targets[@]}"; do
  if grep -Eq -- "$pattern" <<<"$t"; then selected+=("$t"); fi
done
if [ ${#selected[@]} -eq 0 ]; then
  echo "fuzz: no target matches $pattern" >&2
  exit 1
fi
echo "fuzz: ${#selected[@]} targets, $duration each, logs in $logs" >&2

status=0
summary=()
for t in "${selected[@]}"; do
  read -r pkg name <<<"$t"
  log="$logs/$(basename "$pkg")-$name.log"
  start=$(date +%s)
  if go test -run '^$' -fuzz "^${name}\$" -fuzztime "$duration" "${parallel[@]}" "$pkg" >"$log" 2>&1; then
    result=ok
  else
    result=FAIL
    status=1
  fi
  secs=$(( $(date +%s) - start ))
  # The last progress line carries the totals: "fuzz: elapsed: 10m0s, execs: N (R/sec), new interesting: K (total: T)".
  last=$(grep -E '^fuzz: elapsed:' "$log" | tail -1 || true)
  execs=$(sed -nE 's/.*execs: ([0-9]+).*/\1/p' <<<"$last")
  corpus=$(sed -nE 's/.*new interesting: ([0-9]+) \(total: ([0-9]+)\).*/\1 new, \2 total/p' <<<"$last")
  line=$(printf '%-5s %-48s %-28s %6ss  execs=%s  corpus=%s' "$result" "$(basename "$pkg")" "$name" "$secs" "${execs:-?}" "${corpus:-?}")
  summary+=("$line")
  echo "$line" >&2
  if [ "$result" = FAIL ]; then
    grep -E -- '--- FAIL|Failing input written to|panic:|fuzz: elapsed' "$log" | tail -8 >&2 || true
  fi
done
echo >&2
echo "fuzz summary ($duration per target):"
printf '%s\n' "${summary[@]}"
exit $status
