#!/bin/bash
# Leaves answer.txt and logs/ in place: the collect hooks and artifacts
# come after the verifier.
if [ "$(cat answer.txt 2>/dev/null)" = 42 ]; then
  echo "PASS: answer.txt holds 42"
  echo 1 > /logs/verifier/reward.txt
else
  echo "FAIL: answer.txt does not hold 42"
  echo 0 > /logs/verifier/reward.txt
fi
