#!/bin/bash
set -euo pipefail
echo 42 > answer.txt
# Still busy when agent.timeout_sec ends the session.
sleep 60
