#!/bin/bash
# Check if we're in a valid working directory (as Terminal-Bench 2 scripts do).
if [ "$PWD" = "/" ]; then
    echo "Error: No working directory set. Please set a WORKDIR in your Dockerfile before running this script."
    exit 1
fi
if [ "$(cat ./answer.txt 2>/dev/null)" = 42 ]; then
  echo "PASS: ./answer.txt holds 42 (in $PWD)"
  echo 1 > /logs/verifier/reward.txt
else
  echo "FAIL: ./answer.txt does not hold 42 (in $PWD)"
  echo 0 > /logs/verifier/reward.txt
fi
rm -f answer.txt
