#!/bin/bash
# Install the checker at grade time, through the verifier's own proxy. A
# failed install is not the agent's failure: no reward (an error), not 0.
set -u
tools=$(mktemp -d); trap 'rm -rf "$tools"' EXIT
if ! curl -fsS -m 20 -o "$tools/check-primes.sh" http://tools.sandboxd.test:18080/check-primes.sh; then
  echo "could not install the checker from tools.sandboxd.test"
  exit 1
fi
if bash "$tools/check-primes.sh" primes.txt; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
rm -f primes.txt
