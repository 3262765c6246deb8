#!/bin/bash
# A "server" for the check, started in the background like `app & pytest`,
# and never stopped: it keeps this script's stdout open.
sleep 600 &
( while :; do sleep 1; done ) &
if [ "$(cat status.txt 2>/dev/null)" = ready ]; then
  echo "PASS: status.txt says ready"
  echo 1 > /logs/verifier/reward.txt
else
  echo "FAIL: status.txt does not say ready"
  echo 0 > /logs/verifier/reward.txt
fi
rm -f status.txt
