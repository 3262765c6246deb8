#!/bin/bash
set -euo pipefail
echo done > status.txt
