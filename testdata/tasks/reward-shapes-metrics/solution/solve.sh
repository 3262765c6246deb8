#!/bin/bash
set -euo pipefail
echo hello > greeting.txt
echo world > subject.txt
