#!/usr/bin/env bash
# Installs what sandboxd's demo and tests need on a Debian or Ubuntu machine,
# skipping what is already there. Run as root.
#   scripts/deps.sh demo   what `make demo` needs (bubblewrap, util-linux, ssh client)
#   scripts/deps.sh test   everything the test suite drives for real
set -euo pipefail

want=(bubblewrap util-linux procps)
case "${1:-test}" in
  demo) want+=(openssh-client python3) ;;
  test) want+=(openssh-client openssh-server openssh-sftp-server python3 python3-paramiko python3-scp python3-asyncssh tmux curl git sudo asciinema
               iproute2 debootstrap ca-certificates redis-server redis-tools tinyproxy squid dnsutils
               nodejs openjdk-17-jdk-headless) ;;
  *) echo "usage: $0 demo|test" >&2; exit 2 ;;
esac

# OpenSSH's sshd, which the tests and the benchmark start, refuses to run
# without its privilege separation directory, and /run is emptied at boot.
if [ "${1:-test}" = test ] && [ "$(id -u)" -eq 0 ]; then
  install -d -m 0755 /run/sshd
fi

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "sandboxd: missing packages: ${missing[*]}; run as root (or: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "sandboxd: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# Services come with the packages; the tests start their own instances.
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
for svc in redis-server tinyproxy squid ssh; do
  (systemctl stop "$svc" || service "$svc" stop) >/dev/null 2>&1 || true
done
