#!/bin/bash
got=$(cat answer.txt 2>/dev/null)
if [ -n "$EXPECT" ] && [ "$got" = "$EXPECT" ]; then
  echo "PASS: answer.txt holds '$EXPECT'"
  echo 1 > /logs/verifier/reward.txt
else
  echo "FAIL: answer.txt holds '$got', not '$EXPECT'"
  echo 0 > /logs/verifier/reward.txt
fi
rm -f answer.txt
