#!/usr/bin/env bash
# Runs the benchmarks and prints figures and ratios. Not part of the tests.
#   bash bench/run.sh                 berth's own figures
#   bash bench/run.sh --with-dockerd  also installs Debian's docker.io and compares
# Each script starts its own daemons, registry and containers on temp
# directories and removes them all when it ends (or is interrupted).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/node.sh
source scripts/node.sh
bash scripts/setup.sh >/dev/null
if [ "${1:-}" = "--with-dockerd" ] && ! command -v dockerd >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends docker.io >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends docker.io >/dev/null; }
fi
echo "== issue 18's table beside dockerd: idle memory after a workload, run, logs, pull, start with 1,000 containers"
node bench/table.mjs 2 10 1000
echo
echo "== where an idle berthd's memory is after the same workload, over 40 s (issue 18)"
node bench/memory.mjs 1 1000 40
echo
echo "== daemon start-up: fresh, and restarted with 1,000 containers and 100 images (issues 18, 32)"
node bench/startup.mjs 20
echo
echo "== a CI job: start, pull, 200 docker run --rm, 500 small requests, stop (issue 32)"
node bench/ci.mjs 2 200 500
echo
echo "== the run path: API start against runc create+start, docker run --rm step by step, 20 run -d at once (issue 32)"
node bench/runpath.mjs 15 3 20
echo
echo "== small requests beside dockerd: ping, ps, images, inspect, logs (issue 32)"
node bench/api.mjs 40 0
echo "== layer extraction"
node bench/layers.mjs
echo
echo "== cold pull of a 100 MiB image from a loopback registry (issue 3)"
node bench/pull.mjs 3 100 4
echo
echo "== push of a ~105 MB 4-layer image to a loopback registry (issue 16)"
node bench/push.mjs 3 100 3
echo
echo "== containers: run latency, memory per container, list with 1,000 containers (issue 4)"
node bench/containers.mjs 20 20 1000
echo
echo "== commit of a container that wrote 50 MiB and 2,000 files (issue 5)"
node bench/commit.mjs 7
echo
echo "== health checks: berthd's CPU with 100 containers checked every second"
node bench/health.mjs 100 20
echo
echo "== json-file's copy at LogPath: berthd's CPU per MiB of output, the log on disk (issue 28)"
node bench/logcopy.mjs 32 20
echo
echo "== firewall: one change, 20 containers publishing at once (issue 14)"
node bench/firewall.mjs 20
echo
echo "== network links over rtnetlink: attach and detach a container (issue 14)"
node bench/netlink.mjs 50 10
echo
echo "== DNS on user networks: one change, 20 at once, questions during reloads (issue 14)"
node bench/dns.mjs 30
echo
echo "== docker save and docker load of a 105 MB image (issue 16)"
node bench/archive.mjs 5
echo
echo "== networking beside dockerd with its default bridge: run --rm, --network none, 20 run -d at once (issue 14)"
node bench/network.mjs 15 5 20
echo
echo "== docker cp of 100 MiB + 2,000 files into and out of a running container (issue 15)"
node bench/cp.mjs 5
echo
echo "== docker build, classic builder, beside dockerd's: 5 steps with a COPY of 2,000 files, cold and cached (issue 17)"
node bench/build.mjs 10 2000
echo
if [ -n "${CRI_DOCKERD:-}" ] && command -v dockerd >/dev/null; then
  echo "== pods through cri-dockerd: RunPodSandbox to two running containers, memory per pod (issue 28)"
  node bench/pods.mjs 10
else
  echo "(bench/pods.mjs skipped: it needs dockerd and CRI_DOCKERD=/path/to/cri-dockerd)"
fi
