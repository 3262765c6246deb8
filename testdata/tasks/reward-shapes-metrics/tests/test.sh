#!/bin/bash
# One metric per file and their mean as "reward", as a flat reward.json.
greeting=0; subject=0
[ "$(cat greeting.txt 2>/dev/null)" = hello ] && greeting=1
[ "$(cat subject.txt 2>/dev/null)" = world ] && subject=1
reward=$(awk -v a=$greeting -v b=$subject 'BEGIN { print (a + b) / 2 }')
echo "greeting=$greeting subject=$subject reward=$reward"
printf '{"reward": %s, "greeting": %s, "subject": %s}\n' "$reward" "$greeting" "$subject" > /logs/verifier/reward.json
rm -f greeting.txt subject.txt
