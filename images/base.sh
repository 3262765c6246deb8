#!/usr/bin/env bash
# images/base.sh — make sure a minimal Debian base image exists in the local
# Docker engine, for the container tests (no image can be pulled where CI runs).
#
#   images/base.sh bookworm|bullseye [--with-sandbox-tools|--with-attack-tools] [--rebuild]
#
# Result: the image sandboxd-base:<suite> (or sandboxd-base:<suite>-tools with
# --with-sandbox-tools: bubblewrap, util-linux and procps added; or
# sandboxd-base:<suite>-attack with --with-attack-tools: those and what the
# escape suite's attempts drive, python3 and iproute2). The tag is printed on
# stdout, progress goes to stderr, so `tag=$(images/base.sh bookworm)` works.
#
# Three levels, fastest first:
#   1. the image exists and carries the label of this exact recipe → done (~0.1 s)
#   2. the cached tarball for the recipe exists → `docker import` only (seconds)
#   3. otherwise `debootstrap --variant=minbase` → tarball in the cache → import
# The cache key hashes suite, variant, architecture, mirror and package list,
# so changing any of them builds a new tarball instead of reusing a stale one.
# Downloaded .debs are kept in $CACHE_DIR/debs and shared by all recipes.
#
# Environment:
#   SANDBOXD_CACHE_DIR      default /var/cache/sandboxd
#   SANDBOXD_DEBIAN_MIRROR  default http://deb.debian.org/debian
set -euo pipefail

RECIPE_VERSION=1 # bump when the post-processing below changes
CACHE_DIR=${SANDBOXD_CACHE_DIR:-/var/cache/sandboxd}
MIRROR=${SANDBOXD_DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEFAULT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

log() { printf '[images/base.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
usage() {
	echo "usage: images/base.sh bookworm|bullseye [--with-sandbox-tools|--with-attack-tools] [--rebuild]" >&2
	exit 2
}

suite=
tools=0
rebuild=0
for arg in "$@"; do
	case $arg in
	bookworm | bullseye)
		[[ -z $suite ]] || usage
		suite=$arg
		;;
	--with-sandbox-tools) tools=$((tools > 1 ? tools : 1)) ;;
	--with-attack-tools) tools=2 ;;
	--rebuild) rebuild=1 ;;
	-h | --help) usage ;;
	*)
		log "unknown argument: $arg"
		usage
		;;
	esac
done
[[ -n $suite ]] || usage
[[ $(id -u) -eq 0 ]] || die "must run as root (debootstrap and the cache in $CACHE_DIR need it)"
command -v docker >/dev/null || die "docker CLI not found"
docker info >/dev/null 2>&1 || die "the Docker engine does not answer (is dockerd running?)"

packages=(bash ca-certificates)
variant_name=$suite
if ((tools)); then
	# procps: the sandbox tests look for leftover processes with pgrep.
	packages+=(bubblewrap util-linux procps)
	variant_name=$suite-tools
fi
if ((tools > 1)); then
	# The escape suite run inside a container (scripts/container-tests.sh
	# attack): python3 runs the agent's toolbox (test/attack/attackpy_test.go,
	# ctypes and sockets), iproute2's ip builds the network classes' test host
	# and is what the escalation attempts call.
	packages+=(python3 iproute2)
	variant_name=$suite-attack
fi
tag=sandboxd-base:$variant_name
include=$(
	IFS=,
	echo "${packages[*]}"
)
arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
key="v$RECIPE_VERSION suite=$suite variant=minbase arch=$arch mirror=$MIRROR include=$include"
hash=$(printf '%s' "$key" | sha256sum | cut -c1-12)
name=base-$variant_name-$hash
tarball=$CACHE_DIR/$name.tar.gz
label=org.sandboxd.base.recipe

image_is_current() {
	local have
	have=$(docker image inspect --format "{{ index .Config.Labels \"$label\" }}" "$tag" 2>/dev/null) || return 1
	[[ $have == "$hash" ]]
}

if ((!rebuild)) && image_is_current; then
	log "$tag is up to date (recipe $hash)"
	echo "$tag"
	exit 0
fi

mkdir -p "$CACHE_DIR/debs"
# One builder per recipe at a time; a second caller waits and then finds the
# tarball (or image) the first one made.
exec 9>"$CACHE_DIR/.$name.lock"
if ! flock -n 9; then
	log "another run is building $name; waiting for it"
	flock 9
	if ((!rebuild)) && image_is_current; then
		log "$tag is up to date (recipe $hash)"
		echo "$tag"
		exit 0
	fi
fi

root=
# debootstrap mounts proc/sys (and may bind /dev) in the target; never let an
# rm -rf walk into a mount.
unmount_under() {
	local m
	for m in $(awk -v r="$1/" 'index($2 "/", r) == 1 { print $2 }' /proc/mounts | sort -r); do
		umount -l "$m" 2>/dev/null || true
	done
}
cleanup() {
	[[ -n $root && -d $root ]] || return 0
	unmount_under "$root"
	rm -rf --one-file-system "$root" "$root.log"
}
trap cleanup EXIT

build_tarball() {
	if ! command -v debootstrap >/dev/null; then
		log "installing debootstrap"
		apt-get update -qq >&2 || log "apt-get update reported errors; trying the install anyway"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >&2 ||
			die "could not install debootstrap"
	fi
	[[ -e /usr/share/debootstrap/scripts/$suite ]] || die "this debootstrap does not know '$suite'"

	root=$(mktemp -d "$CACHE_DIR/.build-$name.XXXXXX")
	local dlog=$root.log
	log "debootstrap --variant=minbase --include=$include $suite from $MIRROR (log: $dlog)"
	local t0=$SECONDS
	if ! debootstrap --variant=minbase --include="$include" --cache-dir="$CACHE_DIR/debs" \
		"$suite" "$root" "$MIRROR" >"$dlog" 2>&1; then
		log "debootstrap failed; last 40 lines of $dlog:"
		tail -n 40 "$dlog" >&2
		exit 1
	fi
	log "debootstrap done in $((SECONDS - t0)) s"
	unmount_under "$root"

	# What Docker provides at run time, or what only made sense on this host.
	rm -f "$root/etc/resolv.conf" "$root/etc/hostname" "$root/etc/hosts"
	: >"$root/etc/resolv.conf"
	# Make the image's apt usable as a task image's would be (adapt installs
	# bubblewrap with it): main, updates, security, all on the same mirror host.
	local security=${MIRROR%/debian}/debian-security
	local secsuite=$suite-security
	{
		echo "deb $MIRROR $suite main"
		echo "deb $MIRROR $suite-updates main"
		echo "deb $security $secsuite main"
	} >"$root/etc/apt/sources.list"
	rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin \
		"$root"/var/lib/apt/lists/* "$root"/var/log/apt/* "$root"/var/log/dpkg.log \
		"$root"/var/log/bootstrap.log "$root"/tmp/* "$root"/dev/*
	mkdir -p "$root/var/lib/apt/lists/partial"

	log "packing $tarball"
	t0=$SECONDS
	tar --numeric-owner --one-file-system -C "$root" -cf - . | gzip -1 >"$tarball.tmp"
	mv "$tarball.tmp" "$tarball"
	printf '%s\n' "$key" >"$CACHE_DIR/$name.recipe"
	log "packed $(du -h "$tarball" | cut -f1) in $((SECONDS - t0)) s"
	cleanup
	root=
}

if ((rebuild)) || [[ ! -s $tarball ]]; then
	build_tarball
else
	log "using cached $tarball"
fi

log "docker import → $tag"
t0=$SECONDS
docker import \
	--change "ENV PATH=$DEFAULT_PATH" \
	--change 'CMD ["bash"]' \
	--change "LABEL $label=$hash" \
	--change "LABEL org.sandboxd.base.packages=$include" \
	--message "images/base.sh: $key" \
	"$tarball" "$tag" >/dev/null
log "imported $tag in $((SECONDS - t0)) s"
echo "$tag"
