#!/usr/bin/env bash
# images/check-flags.sh — run the sandbox construction (testdata/images/bwrap-probe.sh)
# in containers with Docker's DEFAULT capabilities under each combination of
# `docker run` security options, on the bookworm (bwrap 0.8) and bullseye
# (bwrap 0.4.1) base images. This is how docs/container-flags.md was measured.
#
#   images/check-flags.sh [SET...]        (default: every set below)
#
# Prints, per image and option set, the probe's facts, the one-shot bwrap
# result and the full holder+nsenter result. Starts only `docker run --rm`
# containers, and builds the base images with images/base.sh if needed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
probe=$repo/testdata/images/bwrap-probe.sh
seccomp=$here/seccomp.json

declare -A sets=(
	[none]=""
	[seccomp]="--security-opt seccomp=$seccomp"
	[systempaths]="--security-opt systempaths=unconfined"
	[documented]="--security-opt seccomp=$seccomp --security-opt systempaths=unconfined --security-opt apparmor=unconfined"
	[documented-no-apparmor]="--security-opt seccomp=$seccomp --security-opt systempaths=unconfined"
	[seccomp-unconfined+systempaths]="--security-opt seccomp=unconfined --security-opt systempaths=unconfined"
	[cap-sys-admin]="--cap-add SYS_ADMIN"
	[cap-sys-admin+systempaths]="--cap-add SYS_ADMIN --security-opt systempaths=unconfined"
	[cap-sys-admin+seccomp+systempaths]="--cap-add SYS_ADMIN --security-opt seccomp=$seccomp --security-opt systempaths=unconfined"
	[documented-cap-drop-setfcap]="--security-opt seccomp=$seccomp --security-opt systempaths=unconfined --cap-drop SETFCAP"
	[documented+no-new-privileges]="--security-opt seccomp=$seccomp --security-opt systempaths=unconfined --security-opt no-new-privileges"
)
order=(none seccomp systempaths documented-no-apparmor documented seccomp-unconfined+systempaths
	cap-sys-admin cap-sys-admin+systempaths cap-sys-admin+seccomp+systempaths
	documented-cap-drop-setfcap documented+no-new-privileges)
(($#)) && order=("$@")

images=()
for suite in bookworm bullseye; do
	images+=("$("$here/base.sh" "$suite" --with-sandbox-tools)")
done

for image in "${images[@]}"; do
	for set in "${order[@]}"; do
		[[ -v sets[$set] ]] || {
			echo "unknown set $set" >&2
			exit 2
		}
		echo "=== $image  [$set]  docker run ${sets[$set]}"
		# shellcheck disable=SC2086 # the option sets are word lists
		docker run --rm --network none -v "$probe:/probe.sh:ro" ${sets[$set]} "$image" bash -c '
			bash /probe.sh facts | sed "s/^/  /"
			echo "  -- simple"; bash /probe.sh simple | sed "s/^/  /"
			echo "  -- full";   bash /probe.sh full | sed "s/^/  /"
			if bwrap --help 2>&1 | grep -q -- --disable-userns; then
				echo "  -- simple --disable-userns"; bash /probe.sh simple --disable-userns | sed "s/^/  /"
			fi' 2>&1 || echo "  docker run failed: $?"
	done
done
