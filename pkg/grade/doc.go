// Package grade runs a task's verifier against the sandbox and turns what it
// left behind into a verdict.
//
// The verifier is a visitor (design.md, "Phases and grading"): a process in
// the sandbox's user and network namespaces, but in the substrate's pid
// namespace and in a mount namespace of its own, built over the substrate's
// view of the filesystem. In that namespace, and only there, a fresh copy of
// the task's tests is bound at /tests and a fresh verdict directory at
// /logs/verifier; both live in the harness dir, which is otherwise covered by
// an empty read-only tmpfs. No file of the tests is ever written into the
// shared filesystem, so no agent process, not even one a root agent left
// running, can read the tests or write the verdict. The agent's processes are
// left alone (the verifier usually talks to the servers the agent started),
// and the verifier can see them; the agent never sees the verifier.
//
//	daemon ─ grade.Run
//	  └─ a forked copy joins the holder's user and network namespaces (join.Cmd)
//	       └─ "visitor": unshare(CLONE_NEWNS), binds, masks, read-only /proc and /sys,
//	          child subreaper; waits for the leader, then kills what it left
//	            └─ the enter step (join.Here): seccomp, bounded capabilities, the verifier's
//	               user, the workdir, the exact environment
//	                 └─ /tests/test.sh  > /logs/verifier/test-stdout.txt 2>&1 </dev/null
//
// # Verdicts and exit codes
//
// A verifier that timed out, could not run, or left no finite reward is an
// error with a code of its own, never a reward of 0.0 that reads as the
// agent's failure (lesson 42). `sandboxd grade` and `sandboxd trial` exit with
// Status.ExitCode:
//
//	0    graded            a finite reward was read (test.sh's own exit code is reported, not used)
//	3    no_reward         the verifier finished but left no reward (no file, or an empty one)
//	4    verifier_timeout  the verifier ran past its timeout; its whole tree was killed
//	5    verifier_error    test.sh is missing or could not start, or the reward is unusable
//	125  ExitInternal      sandboxd itself failed (Run returned an error)
//
// 1 and 2 are left out on purpose: shells and flag parsers use them for
// every other failure.
//
// # The shared filesystem
//
// Two directories of the shared filesystem serve as mount points: an empty
// /tests, made for grading (mode 0555) and removed by the last visitor that
// used it, and /logs/verifier. Both are opened without following symlinks
// and checked by device and inode before anything is mounted on them; a
// symlink or file the agent put there ends grading with verifier_error.
// While a verifier runs, /tests is also pinned in the sandbox's own view (an
// empty read-only tmpfs), because a root agent could otherwise rename or
// remove it, which would take the verifier's /tests away and let the agent
// put files of its own there. If the visitor is killed at the timeout, the
// pin goes when /tests is removed; a /tests that was there before grading
// keeps it until the sandbox ends.
//
// # Residual risk
//
// The verifier runs what the agent built; code the agent planted for it (a
// replaced /bin/bash, a sitecustomize, an ld.so.preload) runs with the
// verifier's rights and can write any reward. A root agent can also rename
// /logs while the verifier runs, so that the verifier's writes to
// /logs/verifier land where the agent sees them; the reward is still read
// from the verdict directory in the harness, so this loses a reward but
// forges none. The verdict is as trustworthy as the agent's reach over what
// the verifier executes.
//
// WARNING: security-sensitive. After any change run, as root:
//
//	go test ./pkg/grade/ ./pkg/join/
package grade
