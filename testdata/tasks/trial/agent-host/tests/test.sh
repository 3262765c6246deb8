#!/bin/bash
# The run-time host is the agent's alone: the verifier has no network.
set -u
fail() { echo "FAIL: $*"; echo 0 > /logs/verifier/reward.txt; rm -f token.txt; exit 0; }
if curl -fsS -m 5 -o /dev/null http://allowed.sandboxd.test:18080/token 2>/dev/null; then
  echo "the verifier reached the agent's run-time host"; exit 1
fi
[ -f token.txt ] || fail "token.txt is missing"
grep -Eqx '[0-9a-f]{24}' token.txt || fail "token.txt holds no token: $(head -c 80 token.txt)"
echo "PASS: the agent fetched a token; the verifier cannot"
echo 1 > /logs/verifier/reward.txt
rm -f token.txt
