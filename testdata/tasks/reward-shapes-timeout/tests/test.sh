#!/bin/bash
# Prints, writes a reward that must not count, then hangs past the timeout.
echo "checking status.txt: $(cat status.txt 2>/dev/null || echo missing)"
echo 1 > /logs/verifier/reward.txt
rm -f status.txt
sleep 600
