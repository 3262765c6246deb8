#!/bin/bash
# Oracle: curl honours http_proxy; the refusal comes back as the proxy's 403.
set -euo pipefail
curl -fsS -m 20 -o token.txt http://allowed.sandboxd.test:18080/token
curl -sS -m 20 -o /dev/null -w '%{http_code}' http://refused.sandboxd.test:18080/token > refused.txt || true
echo "token: $(cat token.txt); refused with: $(cat refused.txt)"
