#!/bin/bash
set -euo pipefail
echo "greeting=$GREETING; mode=$MODE" > answer.txt
