#!/bin/bash
# Read back from redis what the agent stored, and compare with answer.txt.
# The verifier shares the sandbox's network, where the peer is offered; it
# asks for it by name when its view resolves the name, else at the address
# the peer is offered on (127.0.0.1:6379: no other listener takes that port).
host=redis
getent hosts redis >/dev/null 2>&1 || host=127.0.0.1
want=$(cat answer.txt 2>/dev/null)
got=
if [ -n "$want" ] && exec 3<>"/dev/tcp/$host/6379"; then
  printf 'GET sandboxd:answer\r\n' >&3
  IFS= read -r head <&3
  if [ "${head:0:1}" = '$' ] && [ "${head%$'\r'}" != '$-1' ]; then
    IFS= read -r got <&3
    got=${got%$'\r'}
  fi
  exec 3>&-
fi
rm -f answer.txt
if [ -n "$want" ] && [ "$got" = "$want" ]; then
  echo "PASS: redis holds $got"
  echo 1 > /logs/verifier/reward.txt
else
  echo "FAIL: answer.txt says '${want}', redis at $host says '${got}'"
  echo 0 > /logs/verifier/reward.txt
fi
