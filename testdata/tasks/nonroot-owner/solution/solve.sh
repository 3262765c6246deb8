#!/bin/bash
# Oracle: plain file creation as the agent user; ownership follows.
set -euo pipefail
rm -rf nonroot-owner-report
mkdir -p nonroot-owner-report/data
echo "owned by me" > nonroot-owner-report/report.txt
chmod go-w nonroot-owner-report/report.txt
echo "a,b,c" > nonroot-owner-report/data/values.csv
