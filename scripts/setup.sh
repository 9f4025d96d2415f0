#!/usr/bin/env bash
# Installs everything berth needs on a Debian 12 machine, then builds it.
# Idempotent and quick when nothing is missing. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  runc conmon catatonit            # the OCI runtime, its monitor, and the init for --init
  aardvark-dns                     # the DNS server of user networks (names, aliases, short ids)
  iproute2 util-linux              # loopback up in a container's network namespace (ip, nsenter)
  containernetworking-plugins iptables  # the CNI plugins (bridge, host-local, loopback, portmap) cri-dockerd runs, replayed in test/clients/cri-dockerd.test.ts
  docker-registry                  # CNCF distribution: the registry the tests and quickstart run
  docker.io                        # dockerd 20.10, an interop partner in tests (image archives); never run as a service
  busybox-static                   # the test images' userland
  skopeo                           # an independent client proving the test images are real
  curl jq openssl apache2-utils    # quickstart, TLS fixtures, htpasswd
  python3-docker                   # the Python SDK, as a client under test
  docker-compose                   # Compose 1.29 (on python3-docker), as a client under test
  golang-go golang-github-docker-docker-dev  # the Go SDK (GOPATH mode), as a client under test
  bzip2 xz-utils                   # bzip2 and xz archives (load, import, build contexts), read through them as dockerd does
  make g++ python3                 # node-gyp: better-sqlite3 and berth's native addon
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # docker.io would start dockerd as a service (its docker0 bridge and iptables rules on the host):
  # policy-rc.d tells the package scripts not to start anything while we install.
  guard=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && guard=1
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [ -n "$guard" ] && rm -f /usr/sbin/policy-rc.d
  if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    systemctl disable docker.service docker.socket >/dev/null 2>&1 || true
  fi
fi

# The Node.js to build and run with (22 or 24; see scripts/node.sh).
# shellcheck source=scripts/node.sh
source scripts/node.sh
echo "setup: node $(node --version) at $(command -v node)"

# npm ci when node_modules is absent or older than the lock file. Nothing in it
# is built for one Node ABI (better-sqlite3 13 ships a Node-API binary; berth's
# own addon is built by every build), so a change of node needs no rebuild.
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "setup: npm ci"
  npm ci --no-audit --no-fund --loglevel=error
fi

echo "setup: build"
npm run --silent build
