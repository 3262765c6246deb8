#!/bin/bash
# The "tool" verifier-installs fetches at grade time from the test upstream.
# Usage: check-primes.sh FILE; exit 0 when FILE holds the first ten primes.
want=$'2\n3\n5\n7\n11\n13\n17\n19\n23\n29'
if [ "$(cat "$1" 2>/dev/null)" = "$want" ]; then
  echo "PASS: the first ten primes"
  exit 0
fi
echo "FAIL: $1 does not hold the first ten primes"
exit 1
