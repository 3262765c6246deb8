#!/usr/bin/env bash
# make demo: the main job on the bundled example task. `sandboxd trial` serves
# the task on this machine (no container), lets the oracle agent solve it over
# SSH, grades it with the verifier as a visitor, stops, and prints the verdict.
# Then the same with the agent that does nothing, which must score 0.
set -euo pipefail
cd "$(dirname "$0")/.."
task=testdata/tasks/server-left-running

echo "== sandboxd trial $task --agent oracle"
bin/sandboxd trial "$task" --agent oracle
echo
echo "== sandboxd trial $task --agent nop"
bin/sandboxd trial "$task" --agent nop || true
