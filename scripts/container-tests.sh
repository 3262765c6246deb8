#!/usr/bin/env bash
# Runs the privileged sandbox tests in containers of Debian bullseye (bwrap
# 0.4.1, util-linux 2.36: no --clearenv, no nsenter --wdns) and bookworm
# (bwrap 0.8), each with Docker's default capability set and the documented
# security options only — what full root on a bare host would hide
# (docs/failures.md#tests-run-under-docker-default-capabilities-too) — and
# the escape suite (test/attack) with the daemon inside containers of both
# releases the same way (docs/security.md). Base images come from
# images/base.sh (cached).
#
#   scripts/container-tests.sh [sandbox] [attack]     (default: both stages)
#
#   SANDBOXD_SUITES         releases of the sandbox stage (default: bullseye bookworm)
#   SANDBOXD_ATTACK_SUITES  releases of the attack stage (default: bullseye bookworm)
set -euo pipefail
cd "$(dirname "$0")/.."

stages=("$@")
((${#stages[@]})) || stages=(sandbox attack)
for s in "${stages[@]}"; do
  case $s in
    sandbox | attack) ;;
    *) echo "usage: $0 [sandbox] [attack]" >&2; exit 2 ;;
  esac
done

bins=$(mktemp -d /tmp/sandboxd-container-tests.XXXX)
running=
cleanup() {
  [[ -z $running ]] || docker rm -f "$running" >/dev/null 2>&1 || true
  rm -rf "$bins"
}
trap cleanup EXIT
secopts=(--security-opt seccomp=images/seccomp.json
  --security-opt systempaths=unconfined
  --security-opt apparmor=unconfined)
status=0

sandbox_stage() {
  local pkgs=(./pkg/bwrap ./pkg/doctor ./pkg/join ./pkg/visit ./pkg/grade ./internal/daemon ./internal/reaper)
  local p
  for p in "${pkgs[@]}"; do
    CGO_ENABLED=0 go test -c -o "$bins/$(basename "$p").test" "$p"
  done

  # These tests drive clients the minimal base images do not carry (curl,
  # python3, redis, git, pip, go); they run on the host in `make test`. The
  # container runs are about the sandbox itself on bwrap 0.4.1 and 0.8 under
  # Docker's default capabilities.
  local skip='TestClients_|TestTrial_|TestEgress_|TestDirectConnectionsFail'
  skip+='|TestPublicStillRefusesLoopbackUpstream|TestVerifierInstallsThroughItsOwnAllowlist'
  skip+='|TestAgentCannotUseOrTakeVisitorPort|TestPeerReachedByNameWithRedisCLI|TestNoNetworkHasNoProxy'
  skip+='|TestAgentServerAnswersVerifier|TestAgentProcessesStayAliveDuringGrading'
  skip+='|TestNoNetworkVerifierCanChownAndReachLoopback'
  # The network's clients (curl, dig, python3, node, java, ssh) against
  # test hosts in network namespaces of their own, which need CAP_NET_ADMIN
  # to make: they run on the host.
  skip+='|TestCaughtClientsUnder|TestCaughtConnectionsOfTheVerifierAreJudgedByItsPolicy'
  skip+='|TestOwnAddressesReachTheSandboxsLoopback|TestVerifierResolvesAndReachesUnderItsOwnAllowlist'
  skip+='|TestResolverForwardsEveryType|TestResolverOpensAllowlistByForwardedAnswers|TestVerifierAsksTheSandboxResolver'
  skip+='|TestHealthcheckUsesTheEnvironmentsPolicy|TestCaughtConnectionsGoThroughTheUpstreamProxy|TestCollectHooksAreTheVerifiersAndBounded'
  # OpenSSH's client, and python3 in the sandbox for a known allocation.
  skip+='|TestKeysAuthorizeAfterStart|TestControlExecIsRecorded|TestStatusUsage'
  # This one rewrites the substrate's /etc/hosts in a private mount
  # namespace of its own, which takes CAP_SYS_ADMIN: the host run has it,
  # a container with Docker's default capabilities does not.
  skip+='|TestPeerTargetIsNotRedirectedByRewrittenHosts'
  # Host mode is for a bare host: this one serves with --host and puts a
  # socket in /run, which a container's overlay root cannot take a bind on.
  skip+='|TestHostSocketsAreMaskedFromTheListMadeAtStart'

  local suite image t
  for suite in ${SANDBOXD_SUITES:-bullseye bookworm}; do
    image=$(images/base.sh "$suite" --with-sandbox-tools)
    for p in "${pkgs[@]}"; do
      t=$(basename "$p")
      echo "=== $suite ($image): $t" >&2
      docker run --rm "${secopts[@]}" \
        -e SANDBOXD_REQUIRE_PRIVILEGED=1 \
        -v "$bins:/opt/sandboxd-tests:ro" \
        "$image" /opt/sandboxd-tests/"$t".test -test.count=1 -test.timeout=10m -test.skip "$skip" || status=1
    done
  done
}

# The escape suite with the daemon as the container's pid 1, not in host
# mode, as in production. Left out: the classes that start containers of
# their own from the host run (TestEscape_SharedFilesystem and the race
# class, whose container half is TestEscape_RacesContainer); they run in
# `make test`'s host stage and in `make attack`.
#
# The container starts in the test binary's attack-container-setup role
# (test/attack/substrate_test.go), with CAP_NET_ADMIN added for one thing:
# the network classes' test host, a network namespace joined to the
# container's by a veth pair. The setup drops CAP_NET_ADMIN from every set
# and checks the result against the bounding set of a container started
# without it (probed here) before it executes the suite, so that the suite
# and the daemon run with exactly Docker's default capabilities. No network
# (--network none): the test host is the only thing beyond loopback.
# Workdirs are made in a 64 MiB tmpfs. About 70 s a release on 2 cores;
# bounded by the test binary's own timeout, and by `timeout` around docker
# run.
attack_stage() {
  CGO_ENABLED=0 go test -c -o "$bins/attack.test" ./test/attack
  local skip='TestEscape_SharedFilesystem|TestEscape_Races'
  local suite image caps t0 rc
  for suite in ${SANDBOXD_ATTACK_SUITES:-bullseye bookworm}; do
    image=$(images/base.sh "$suite" --with-attack-tools)
    caps=$(docker run --rm --network none "${secopts[@]}" "$image" awk '/^CapBnd/ { print $2 }' /proc/self/status)
    running=sandboxd-attack-suite-$$-$suite
    echo "=== $suite ($image): the escape suite, Docker's default capabilities (CapBnd $caps)" >&2
    t0=$SECONDS
    rc=0
    timeout --kill-after=30s 25m docker run --rm --name "$running" --network none \
      "${secopts[@]}" --cap-add NET_ADMIN \
      --tmpfs /attack-wd:rw,exec,nosuid,nodev,size=64m,mode=1777 \
      -e SANDBOXD_REQUIRE_PRIVILEGED=1 \
      -e SANDBOXD_CHILD=attack-container-setup \
      -e SANDBOXD_ATTACK_WORKDIRS=/attack-wd \
      -e SANDBOXD_ATTACK_DOCKER_CAPS="$caps" \
      -v "$bins:/opt/sandboxd-tests:ro" \
      "$image" /opt/sandboxd-tests/attack.test -test.count=1 -test.timeout=20m \
      -test.run Escape -test.skip "$skip" || rc=$?
    docker rm -f "$running" >/dev/null 2>&1 || true
    running=
    echo "=== $suite: the escape suite in a container: exit $rc after $((SECONDS - t0)) s" >&2
    ((rc == 0)) || status=1
  done
}

for s in "${stages[@]}"; do
  "${s}_stage"
done
exit $status
