#!/bin/bash
set -euo pipefail
echo 42 > answer.txt
# Still at work when agent.timeout_sec comes: a heartbeat the verifier
# watches, since Harbor grades with the agent's processes alive.
i=0
while true; do
  i=$((i + 1))
  echo "$i" > heartbeat
  sleep 0.1
done
