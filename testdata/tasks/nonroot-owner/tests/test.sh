#!/bin/bash
# The verifier is root; the agent was uid 1000, gid 1000. What the agent
# made is checked and then removed, so that a later run on the same machine
# starts from nothing.
D=/tmp/nonroot-owner-report
trap 'rm -rf "$D"' EXIT
fail() { echo "FAIL: $*"; echo 0 > /logs/verifier/reward.txt; exit 0; }
owner() { [ "$(stat -c %u:%g "$1" 2>/dev/null)" = 1000:1000 ] || fail "$1 is not owned by 1000:1000 ($(stat -c %u:%g "$1" 2>&1))"; }

[ -d "$D" ] && [ ! -L "$D" ] || fail "$D is missing"
for p in "$D" "$D/report.txt" "$D/data" "$D/data/values.csv"; do
  [ -e "$p" ] || fail "$p is missing"
  owner "$p"
done
[ "$(cat "$D/report.txt")" = "owned by me" ] || fail "report.txt has the wrong content"
[ "$(cat "$D/data/values.csv")" = "a,b,c" ] || fail "values.csv has the wrong content"
case "$(stat -c %A "$D/report.txt")" in
  ?????w????|????????w?) fail "report.txt is writable by others" ;;
esac
echo "PASS: everything belongs to 1000:1000"
echo 1 > /logs/verifier/reward.txt
