#!/bin/bash
# Whether the agent is still at work while it is graded, for the test to
# check; the reward is the answer's alone.
a=$(cat heartbeat 2>/dev/null); sleep 1; b=$(cat heartbeat 2>/dev/null)
if [ -n "$a" ] && [ "$a" != "$b" ]; then
  echo "the agent is still running while it is graded ($a, then $b)"
fi
if [ "$(cat answer.txt 2>/dev/null)" = 42 ]; then
  echo "PASS: answer.txt holds 42"
  echo 1 > /logs/verifier/reward.txt
else
  echo "FAIL: answer.txt does not hold 42"
  echo 0 > /logs/verifier/reward.txt
fi
rm -f answer.txt
