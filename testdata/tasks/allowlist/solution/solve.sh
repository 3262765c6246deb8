#!/bin/bash
# Oracle: curl with no proxy, as under Docker: the allowed name resolves and
# its connection is carried; the refused name does not resolve (the
# sandbox's resolver answers NXDOMAIN under allowlist), so curl reports no
# HTTP status at all (000).
set -euo pipefail
curl -fsS -m 20 -o token.txt http://allowed.sandboxd.test:18080/token
curl -sS -m 20 -o /dev/null -w '%{http_code}' http://refused.sandboxd.test:18080/token > refused.txt || true
echo "token: $(cat token.txt); refused with: $(cat refused.txt)"
