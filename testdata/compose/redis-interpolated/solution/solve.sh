#!/bin/bash
# Oracle: use what the interpolated compose file put in the environment.
set -euo pipefail
value="answer-$RANDOM$RANDOM"
exec 3<>"/dev/tcp/$CACHE_HOST/$CACHE_PORT"
printf 'SET %s %s\r\n' "$ANSWER_KEY" "$value" >&3
IFS= read -r reply <&3
exec 3>&-
if [ "${reply%$'\r'}" != "+OK" ]; then
  echo "redis said: $reply" >&2
  exit 1
fi
printf '%s\n%s\n' "$value" "$PRICE_NOTE" > answer.txt
echo "stored $value in redis at $CACHE_HOST:$CACHE_PORT"
