#!/bin/bash
# Oracle: store a fresh value in the redis sidecar, by its name, and keep a copy.
set -euo pipefail
value="answer-$RANDOM$RANDOM"
exec 3<>/dev/tcp/redis/6379
printf 'SET sandboxd:answer %s\r\n' "$value" >&3
IFS= read -r reply <&3
exec 3>&-
if [ "${reply%$'\r'}" != "+OK" ]; then
  echo "redis said: $reply" >&2
  exit 1
fi
echo "$value" > answer.txt
echo "stored $value in redis"
