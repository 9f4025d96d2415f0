#!/usr/bin/env bash
# Runs the benchmarks and prints figures and ratios. Not part of the tests.
#   bash bench/run.sh                 berth's own figures
#   bash bench/run.sh --with-dockerd  also installs Debian's docker.io and compares
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
if [ "${1:-}" = "--with-dockerd" ] && ! command -v dockerd >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io >/dev/null
fi
echo "== daemon start-up"
node bench/startup.mjs 20
echo "== layer extraction"
node bench/layers.mjs
