#!/bin/bash
# The verifier fetches the token under its own allowlist (its connections
# are caught and judged by its policy): without it there is nothing to
# compare with, and that is not the agent's failure, so the script ends
# without a reward (no_reward, an error).
set -u
fail() { echo "FAIL: $*"; echo 0 > /logs/verifier/reward.txt; exit 0; }
want=$(curl -fsS -m 20 http://allowed.sandboxd.test:18080/token) || { echo "the verifier could not reach its allowed host"; exit 1; }
[ -f token.txt ] || fail "token.txt is missing"
[ "$(cat token.txt)" = "$want" ] || fail "token.txt does not hold this trial's token"
[ "$(tr -d ' \n' < refused.txt 2>/dev/null)" = 000 ] || fail "refused.txt does not say 000 (no answer from the refused host)"
echo "PASS: fetched the allowed host, refused the other"
echo 1 > /logs/verifier/reward.txt
rm -f token.txt refused.txt
