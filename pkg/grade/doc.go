// Package grade runs a task's verifier against the sandbox and turns what it
// left behind into a verdict.
//
// The verifier is a visitor: a process in the sandbox's user and network
// namespaces, in a pid namespace of its own (it is pid 2 there, under the
// visitor), and in a mount namespace of its own whose root is its own too: a
// tmpfs whose top-level entries are binds of the substrate's. /tests, a fresh
// copy of the task's tests, and /logs/verifier, a fresh verdict directory,
// exist only in that root, bound from the harness dir, which is covered by
// an empty read-only tmpfs; /logs is rebuilt there one level down (its
// entries bound, verifier its own). Nothing of grading is ever made in the
// shared filesystem, nothing is mounted in the sandbox's namespace, and once
// the root stands no name in the shared filesystem that the agent can
// rename, swap or replace is resolved again for the verifier's /tests or
// verdict. The agent's processes are left alone (the verifier usually talks
// to the servers the agent started, over the sandbox's network); the
// verifier does not see them in its /proc, and the agent never sees the
// verifier. Nothing the verifier runs can see or signal the daemon.
//
//	daemon ─ grade.Run
//	  └─ a forked copy joins the holder's user and network namespaces and makes
//	     a pid namespace (join.Cmd, NewPIDNamespace)
//	       └─ "visitor", pid 1 there: unshare(CLONE_NEWNS), masks, its own root
//	          (binds of /'s entries, /tests, /logs), a fresh /proc, pivot_root,
//	          read-only /proc and /sys paths; waits for the leader, then kills
//	          what it left (everything in its pid namespace ends with it anyway)
//	            └─ the enter step (join.Here): seccomp, bounded capabilities, the verifier's
//	               user, the workdir, the exact environment
//	                 └─ /tests/test.sh  > /logs/verifier/test-stdout.txt 2>&1 </dev/null
//
// # Verdicts and exit codes
//
// A verifier that timed out, could not run, or left no finite reward is an
// error with a code of its own, never a reward of 0.0 that reads as the
// agent's failure (docs/failures.md#timeout-or-missing-reward-is-never-a-zero).
// `sandboxd grade` and `sandboxd trial` print a Verdict (Verdict.Print, its
// one encoding: {"status", "reward", "exit_code", "duration_sec",
// "stdout_tail", "message"}, and trial's "agent") and exit with Verdict.Exit:
//
//	0    graded            a finite reward was read (test.sh's own exit code is reported, not used)
//	3    no_reward         the verifier finished but left no reward (no file, or an empty one)
//	4    verifier_timeout  the verifier ran past its timeout; its whole tree was killed
//	5    verifier_error    test.sh is missing or could not start, or the reward is unusable
//	6    graded            trial only: a reward was read, but the agent ran past agent.timeout_sec
//	7    unhealthy         trial only: the healthcheck never passed; no agent ran, nothing was graded
//	125  error             sandboxd itself failed: no daemon answered, no task is served, or
//	                       grading could not be carried out (Run returned an error); the
//	                       reward is null and the message says why (Internal)
//
// Only graded carries a reward. When Run returns an error its verdict says
// verifier_error with the same message; sandboxd reports that failure as
// error. 1 and 2 are left out on purpose: shells and flag parsers use them
// for every other failure.
//
// # The shared filesystem
//
// Everything the visitor takes from the shared filesystem it opens once,
// beneath a directory descriptor, without following a symlink, and mounts
// through /proc/self/fd: a swap between two system calls changes at most
// which object of the agent's is bound into the verifier's view, never where
// the tests or the verdict are. The harness dir is used only when it is the
// very directory the daemon opened, and the directories above it are mount
// points in the sandbox's view (bwrap's plan pins them), so the agent can
// rename none of them. The verdict is copied to the real /logs/verifier
// afterwards only if that is still the directory it was when serve started.
// Top-level entries the agent makes while the verifier runs do not appear in
// the verifier's root, and writes to new top-level names go to its tmpfs.
//
// # Residual risk
//
// The verifier runs what the agent built; code the agent planted for it (a
// replaced /bin/bash, a sitecustomize, an ld.so.preload) runs with the
// verifier's rights and can write any reward. The verdict is as trustworthy
// as the agent's reach over what the verifier executes. Under Harbor the
// verifier shares the agent's pid namespace and sees its processes; here it
// does not (a pid namespace that holds the agent's and not the daemon's would
// have to be the sandbox's parent, which bwrap does not make).
//
// WARNING: security-sensitive. After any change run, as root:
//
//	go test ./pkg/grade/ ./pkg/join/
package grade
