#!/bin/bash
# testdata/images/bwrap-probe.sh — build the sandbox the way sandboxd does, in
# plain bash, and report each step. Runs INSIDE a container as root (it is what
# images/check-flags.sh runs under every combination of `docker run` options).
#
#   bwrap-probe.sh facts    what can be detected without bwrap (doctor's hints)
#   bwrap-probe.sh simple   one-shot bwrap with the holder's namespace options
#   bwrap-probe.sh full     holder with --info-fd/--userns-block-fd, identity
#                           map written from outside, Docker's masks re-applied,
#                           then nsenter --user --mount --pid --uts --ipc --net
#
# Output: "key: value" lines; the last line is "RESULT ok" or
# "RESULT fail <step>: <bwrap's or nsenter's exact stderr>".
# Needs only what sandboxd-base:<suite>-tools has: bash, coreutils, util-linux,
# bubblewrap, perl-base (for raw syscalls).
set -u
mode=${1:-full}
extra=("${@:2}") # extra bwrap options (e.g. --disable-userns)

ns_opts=(--unshare-user --unshare-pid --unshare-ipc --unshare-uts --unshare-net
	--unshare-cgroup-try --die-with-parent)
mounts=(--bind / / --proc /proc --dev /dev)

oneline() { tr '\n' ' ' | sed 's/ *$//'; }

# Raw syscall probes through perl: the return value tells who said no. A
# seccomp rule answers EPERM before the kernel looks at the arguments; the
# kernel answers EBADF/EFAULT/EINVAL for the deliberately bad arguments below.
sysnr() {
	case $(uname -m) in
	x86_64) declare -A n=([clone]=56 [unshare]=272 [setns]=308 [mount]=165 [umount2]=166 [pivot_root]=155 [clone3]=435) ;;
	aarch64) declare -A n=([clone]=220 [unshare]=97 [setns]=268 [mount]=40 [umount2]=39 [pivot_root]=41 [clone3]=435) ;;
	*) echo -1; return ;;
	esac
	echo "${n[$1]}"
}
errname() { perl -e '$!=shift; print $!+0 == 0 ? "ok" : "$!"' "$1"; }
probe() { # probe NAME PERL-EXPR-RETURNING-ERRNO
	local e
	e=$(perl -e "$2" 2>/dev/null) || e=-1
	echo "syscall.$1: $(errname "$e")"
}

facts() {
	echo "bwrap: $(bwrap --version 2>&1)"
	echo "kernel: $(uname -r)"
	echo "seccomp: $(grep -E '^Seccomp(_filters)?:' /proc/self/status | oneline)"
	echo "capeff: $(awk '/^CapEff/ {print $2}' /proc/self/status)"
	# AppArmor: only meaningful when the module is loaded on the host.
	if [[ -d /sys/module/apparmor ]]; then echo "apparmor.module: loaded"; else echo "apparmor.module: absent"; fi
	local aa
	aa=$(cat /proc/self/attr/apparmor/current 2>/dev/null || cat /proc/self/attr/current 2>&1)
	echo "apparmor.current: $(echo "$aa" | tr -d '\0' | oneline)"
	echo "apparmor_restrict_unprivileged_userns: $(cat /proc/sys/kernel/apparmor_restrict_unprivileged_userns 2>/dev/null || echo absent)"
	echo "unprivileged_userns_clone: $(cat /proc/sys/kernel/unprivileged_userns_clone 2>/dev/null || echo absent)"
	echo "max_user_namespaces: $(cat /proc/sys/user/max_user_namespaces 2>/dev/null || echo absent)"
	# Docker's masks: anything mounted below /proc other than /proc itself.
	echo "proc.overmounts: $(awk '$5 ~ "^/proc/" {print $5}' /proc/self/mountinfo | oneline)"
	echo "proc.sys: $(awk '$5 == "/proc/sys" {print $6}' /proc/self/mountinfo)"
	echo "gvisor.dmesg: $(dmesg 2>/dev/null | grep -c -i gvisor || true)"

	local nr
	nr=$(sysnr unshare)
	probe unshare_user "syscall($nr, 0x10000000); print \$!+0"
	probe clone_newuser 'use POSIX; my $r = syscall('"$(sysnr clone)"', 0x10000000|17, 0, 0, 0, 0); if ($r == 0) { POSIX::_exit(0) } if ($r > 0) { waitpid($r, 0); print 0 } else { print $!+0 }'
	probe clone3 "syscall($(sysnr clone3), 0, 0); print \$!+0" # kernel: EFAULT; seccomp default: ENOSYS
	probe setns "syscall($(sysnr setns), -1, 0); print \$!+0"  # kernel: EBADF
	probe mount "syscall($(sysnr mount), 0, 0, 0, 0, 0); print \$!+0" # kernel: EFAULT
	probe umount2 "syscall($(sysnr umount2), 0, 0xffff); print \$!+0" # kernel: EINVAL
	# pivot_root checks CAP_SYS_ADMIN before its arguments: ask from inside a
	# fresh user+mount namespace, where we hold it (kernel: EFAULT).
	probe pivot_root_in_userns "if (syscall($(sysnr unshare), 0x10020000) != 0) { print 1000+\$!; exit } syscall($(sysnr pivot_root), 0, 0); print \$!+0"
	# A fresh proc mount in a user+pid namespace, without bwrap.
	local o
	if o=$(unshare --user --map-root-user --mount --pid --fork --mount-proc true 2>&1); then
		echo "unshare_mount_proc: ok"
	else
		echo "unshare_mount_proc: $(echo "$o" | oneline)"
	fi
}

simple() {
	local out
	out=$(bwrap "${ns_opts[@]}" "${mounts[@]}" --cap-drop ALL "${extra[@]}" \
		-- sh -c 'id -u; cat /proc/self/uid_map' 2>&1)
	local rc=$?
	echo "simple.output: $(echo "$out" | oneline)"
	if ((rc == 0)); then echo "RESULT ok"; else echo "RESULT fail bwrap: $(echo "$out" | oneline)"; fi
}

full() {
	local dir
	dir=$(mktemp -d)
	mkfifo "$dir/block"
	local bw
	exec {bw}<>"$dir/block" # so that bwrap's open of the fifo does not block
	# Docker 20.10's lists (HostConfig.MaskedPaths / ReadonlyPaths of a default
	# container), re-applied over the fresh /proc, skipping what this kernel
	# lacks: bwrap fails on a missing source ("Can't find source path"), and
	# e.g. /proc/sysrq-trigger and /proc/kcore may not exist.
	local masks=(--ro-bind /sys /sys) f
	for f in /proc/asound /proc/acpi /proc/kcore /proc/keys /proc/latency_stats /proc/timer_list \
		/proc/timer_stats /proc/sched_debug /proc/scsi /sys/firmware; do
		if [[ -d $f ]]; then
			masks+=(--tmpfs "$f" --remount-ro "$f")
		elif [[ -e $f ]]; then
			masks+=(--ro-bind /dev/null "$f")
		fi
	done
	for f in /proc/bus /proc/fs /proc/irq /proc/sys /proc/sysrq-trigger; do
		[[ -e $f ]] && masks+=(--ro-bind "$f" "$f")
	done
	env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin bwrap "${ns_opts[@]}" --info-fd 3 --userns-block-fd 4 --cap-drop ALL \
		"${mounts[@]}" "${masks[@]}" "${extra[@]}" \
		-- sh -c 'echo ready; exec sleep 600' \
		3>"$dir/info" 4<"$dir/block" >"$dir/out" 2>"$dir/err" {bw}>&- &
	local bpid=$! cpid= i
	cleanup() { kill "$bpid" 2>/dev/null; wait "$bpid" 2>/dev/null; rm -rf "$dir"; }
	for ((i = 0; i < 100; i++)); do
		cpid=$(sed -n 's/.*"child-pid": *\([0-9]*\).*/\1/p' "$dir/info" 2>/dev/null)
		[[ -n $cpid ]] && grep -q '}' "$dir/info" 2>/dev/null && break
		kill -0 "$bpid" 2>/dev/null || break
		sleep 0.1
	done
	if [[ -z $cpid ]]; then
		wait "$bpid" 2>/dev/null
		echo "RESULT fail create: $(oneline <"$dir/err")"
		cleanup
		return
	fi
	echo "child-pid: $cpid"
	local map err
	map=$(awk '{print $1, $1, $3}' /proc/self/uid_map)
	if ! err=$( (echo "$map" >"/proc/$cpid/uid_map") 2>&1); then
		echo "RESULT fail uid_map: $err"
		cleanup
		return
	fi
	echo allow >"/proc/$cpid/setgroups" 2>/dev/null
	map=$(awk '{print $1, $1, $3}' /proc/self/gid_map)
	if ! err=$( (echo "$map" >"/proc/$cpid/gid_map") 2>&1); then
		echo "RESULT fail gid_map: $err"
		cleanup
		return
	fi
	echo x >&"$bw"
	exec {bw}>&-
	for ((i = 0; i < 100; i++)); do
		grep -q ready "$dir/out" && break
		kill -0 "$bpid" 2>/dev/null || break
		sleep 0.1
	done
	if ! grep -q ready "$dir/out"; then
		wait "$bpid" 2>/dev/null
		echo "RESULT fail setup: $(oneline <"$dir/err")"
		cleanup
		return
	fi
	echo "holder: ready"
	local cg=()
	[[ $(readlink "/proc/$cpid/ns/cgroup") != $(readlink /proc/self/ns/cgroup) ]] && cg=(--cgroup)
	local out rc
	out=$(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin nsenter --target "$cpid" --user --mount --pid --uts --ipc --net "${cg[@]}" --wd \
		sh -c 'echo "uid=$(id -u) pid1=$(cat /proc/1/comm) ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | tr "\n" ,) uid_map_lines=$(wc -l </proc/self/uid_map) capeff=$(awk "/^CapEff/ {print \$2}" /proc/self/status)"
		     echo "proc_sys=$( (echo 1 >/proc/sys/kernel/core_pattern) 2>&1 | sed "s/.*: //") sys=$( (touch /sys/x) 2>&1 | sed "s/.*: //") proc_keys=$( (cat /proc/keys >/dev/null && echo readable) 2>&1 | sed "s/.*: //") proc_submounts=$(awk "\$5 ~ /^\/proc\// {n++} END {print n+0}" /proc/self/mountinfo)"' 2>&1)
	rc=$?
	# A visitor: the sandbox's user+net namespaces, the substrate's pid
	# namespace, and a mount namespace of its own made with unshare(2).
	local vout vrc
	vout=$(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin nsenter --target "$cpid" --user --net -- \
		unshare --mount -- sh -c 'mount -t tmpfs -o size=1m tmpfs /mnt && echo "visitor: mount-ok ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | tr "\n" ,)"' 2>&1)
	vrc=$?
	echo "visitor.output: $(echo "$vout" | oneline)"
	echo "nsenter.cgroup: ${cg[*]:-no}"
	echo "nsenter.output: $(echo "$out" | oneline)"
	if ((rc != 0)); then
		echo "RESULT fail nsenter: $(echo "$out" | oneline)"
	elif ((vrc != 0)); then
		echo "RESULT fail visitor: $(echo "$vout" | oneline)"
	else
		echo "RESULT ok"
	fi
	cleanup
}

case $mode in
facts) facts ;;
simple) simple ;;
full) full ;;
*)
	echo "usage: $0 facts|simple|full [extra bwrap options]" >&2
	exit 2
	;;
esac
