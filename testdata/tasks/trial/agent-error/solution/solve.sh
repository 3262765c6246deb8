#!/bin/bash
set -euo pipefail
echo 42 > answer.txt
exit 3
