#!/bin/bash
# Talk to the console the agent left running, with a word it cannot guess.
nonce="check-$RANDOM$RANDOM"
reply=$(/usr/bin/python3 - "$nonce" <<'PY' 2>&1
import socket, sys
c = socket.create_connection(("127.0.0.1", 6665), timeout=5)
c.settimeout(5)
c.sendall(sys.argv[1].encode() + b"\n")
print(c.makefile().readline().rstrip("\n"))
PY
)
if [ "$reply" = "PONG $nonce" ]; then
  echo "PASS: the console answered: $reply"
  echo 1 > /logs/verifier/reward.txt
else
  echo "FAIL: no console answer on 127.0.0.1:6665 (got: $reply)"
  echo 0 > /logs/verifier/reward.txt
fi
