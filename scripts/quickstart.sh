#!/usr/bin/env bash
# The main job: set up everything on a fresh Debian 12 machine (as root), start a
# local registry seeded from fixtures/ and berthd on a socket under the repository,
# then walk through the mission's operations with curl, printing each request and
# answer. berthd and the registry keep running afterwards; `stop` ends them.
#   npm run quickstart            set up, start, walk through
#   npm run quickstart -- stop    stop berthd and the registry
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
Q=$ROOT/.quickstart
SOCK=$Q/berth.sock

stop() {
  local pids=()
  for f in "$Q/berthd.pid" "$Q/registry.pid"; do
    if [ -f "$f" ]; then
      pids+=("$(cat "$f")")
      kill "${pids[-1]}" 2>/dev/null || true
    fi
    rm -f "$f"
  done
  for p in "${pids[@]}"; do
    while kill -0 "$p" 2>/dev/null; do sleep 0.05; done
  done
  # The default bridge and berth's firewall chains outlive berthd (as docker0 and DOCKER's outlive
  # dockerd, so that running containers keep their network); the walkthrough's containers are gone,
  # so a stop leaves the machine as it found it, unless a container still runs under its monitor.
  if [ -d "$Q/data" ] && ! pgrep -f "conmon.*$Q/" >/dev/null; then
    ip link del berth0 2>/dev/null || true
    [ -f dist/engine/network/firewall.js ] && node -e "import('./dist/engine/network/firewall.js')
      .then((m) => new m.Firewall({ prefix: 'BERTH' }).teardown())" 2>/dev/null || true
  fi
}
if [ "${1:-}" = "stop" ]; then stop; echo "stopped"; exit 0; fi

# shellcheck source=scripts/node.sh
source scripts/node.sh
bash scripts/setup.sh
stop
mkdir -p "$Q"

# A local registry (CNCF distribution) on a free loopback port, with its own storage.
PORT=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
REG=127.0.0.1:$PORT
cat > "$Q/registry.yml" <<YML
version: 0.1
log: { level: error }
storage: { filesystem: { rootdirectory: $Q/registry }, delete: { enabled: true } }
http: { addr: $REG }
YML
docker-registry serve "$Q/registry.yml" >"$Q/registry.log" 2>&1 &
echo $! >"$Q/registry.pid"
until curl -sf "http://$REG/v2/" >/dev/null; do sleep 0.1; done
node fixtures/seed-registry.mjs "$REG"

# berthd on a socket under the repository, with its own data root.
node bin/berthd.cjs -H "unix://$SOCK" --data-root "$Q/data" --exec-root "$Q/exec" \
  --pidfile "$Q/berthd.pid" --config-file /dev/null >"$Q/berthd.log" 2>&1 &
until curl -sf --unix-socket "$SOCK" http://localhost/_ping >/dev/null; do sleep 0.05; done

LAST=
show() { # METHOD PATH [JSON BODY]: print the request and the answer; the body stays in $LAST
  local method=$1 path=$2 body=${3:-}
  local args=(-s -X "$method" --unix-socket "$SOCK" -o "$Q/last" -w '%{http_code}')
  [ -n "$body" ] && args+=(-H 'Content-Type: application/json' -d "$body")
  echo
  echo "\$ curl -X $method --unix-socket $SOCK 'http://localhost$path'${body:+ -H 'Content-Type: application/json' -d '$body'}"
  local code
  code=$(curl "${args[@]}" "http://localhost$path")
  LAST=$(cat "$Q/last")
  printf '%s\n[HTTP %s]\n' "$LAST" "$code"
}

show GET /v1.43/_ping
show GET /v1.43/version
show GET /v1.43/info
if [ -f scripts/walkthrough.sh ]; then
  # shellcheck source=/dev/null
  source scripts/walkthrough.sh
fi

cat <<MSG

berthd is serving on $SOCK (logs: $Q/berthd.log); the registry is at $REG.
Point your tools at it:
  export DOCKER_HOST=unix://$SOCK
Stop both with: npm run quickstart -- stop
MSG
