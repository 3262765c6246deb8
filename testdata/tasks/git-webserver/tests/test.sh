#!/bin/bash
# Clone over SSH with the verifier's own key (it lives only in the tests),
# push a page with a word the agent cannot guess, and fetch it from the web
# server the push was supposed to update.
set -u
W=/tmp/sandboxd-tasks/git-webserver
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; echo 0 > /logs/verifier/reward.txt; exit 0; }

install -m 600 /tests/verifier_key "$tmp/key"
export GIT_SSH_COMMAND="ssh -i $tmp/key -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout=5"
nonce="page-$RANDOM$RANDOM"

git clone -q "ssh://root@127.0.0.1$W/project.git" "$tmp/clone" || fail "git clone over SSH"
cd "$tmp/clone" || fail "clone directory"
git checkout -q -B main
echo "<h1>$nonce</h1>" > index.html
git add index.html
git -c user.name=grader -c user.email=grader@sandboxd.invalid commit -q -m "grader $nonce" || fail "commit"
git push -q origin main || fail "git push over SSH"

for _ in $(seq 50); do
  if curl -fsS --noproxy '*' -m 5 http://127.0.0.1:8080/index.html 2>/dev/null | grep -q "$nonce"; then
    echo "PASS: cloned, pushed, and the web server published the push"
    echo 1 > /logs/verifier/reward.txt
    exit 0
  fi
  sleep 0.2
done
fail "http://127.0.0.1:8080/index.html does not show the pushed page"
