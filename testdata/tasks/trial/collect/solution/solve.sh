#!/bin/bash
set -euo pipefail
echo 42 > answer.txt
mkdir -p logs/run
echo "solved" > logs/notes.txt
echo "step 1" > logs/run/1.log
echo "scratch" > logs/run/scratch.tmp
# What a collector must never read through.
ln -s /etc/shadow logs/shadow
