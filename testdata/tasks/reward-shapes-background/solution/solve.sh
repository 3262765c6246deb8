#!/bin/bash
set -euo pipefail
echo ready > status.txt
