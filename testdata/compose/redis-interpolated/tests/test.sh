#!/bin/bash
# The values are written out here, not read from the environment: the test
# checks that interpolation gave the agent port 6380 (from .env), the key
# sandboxd:answer (KEY_PREFIX from .env) and the literal "costs $5" ($$).
host=cache
getent hosts cache >/dev/null 2>&1 || host=127.0.0.1
want=$(sed -n 1p answer.txt 2>/dev/null)
note=$(sed -n 2p answer.txt 2>/dev/null)
got=
if [ -n "$want" ] && exec 3<>"/dev/tcp/$host/6380"; then
  printf 'GET sandboxd:answer\r\n' >&3
  IFS= read -r head <&3
  if [ "${head:0:1}" = '$' ] && [ "${head%$'\r'}" != '$-1' ]; then
    IFS= read -r got <&3
    got=${got%$'\r'}
  fi
  exec 3>&-
fi
rm -f answer.txt
if [ -n "$want" ] && [ "$got" = "$want" ] && [ "$note" = 'costs $5' ]; then
  echo "PASS: redis at $host:6380 holds $got; the note is '$note'"
  echo 1 > /logs/verifier/reward.txt
else
  echo "FAIL: answer.txt says '${want}' and '${note}', redis at $host:6380 says '${got}'"
  echo 0 > /logs/verifier/reward.txt
fi
