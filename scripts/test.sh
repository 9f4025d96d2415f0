#!/usr/bin/env bash
# The whole test suite, with all set-up, on a fresh Debian 12 machine (as root).
# Extra arguments go to vitest (e.g. a test file to run just that).
set -euo pipefail
cd "$(dirname "$0")/.."
# The Node.js the suite runs on (24 unless BERTH_NODE=system; see scripts/node.sh).
# shellcheck source=scripts/node.sh
source scripts/node.sh
bash scripts/setup.sh

# The tests are TypeScript too: type-check them with the sources.
npx tsc -p tsconfig.test.json
# Formatting and lint (Biome) are part of the suite, so CI holds them.
npx biome check .

report=$(mktemp /tmp/berth-vitest-XXXXXX.json)
trap 'rm -f "$report"' EXIT
set +e
npx vitest run --reporter=default --reporter=json --outputFile.json="$report" "$@"
status=$?
set -e
# A closing line in the plain form CI reads: "N passed, N failed, N skipped".
node -e '
  const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  const skipped = r.numPendingTests + r.numTodoTests;
  console.log(`tests: ${r.numPassedTests} passed, ${r.numFailedTests} failed, ${skipped} skipped`);
  if (r.numTotalTests === 0) { console.error("no test ran"); process.exit(1); }
' "$report" || status=1
exit $status
