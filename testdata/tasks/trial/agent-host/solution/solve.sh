#!/bin/bash
set -euo pipefail
curl -fsS -m 20 -o token.txt http://allowed.sandboxd.test:18080/token
echo "token: $(cat token.txt)"
