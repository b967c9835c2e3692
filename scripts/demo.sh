#!/usr/bin/env bash
# A short tour of the log core through the CLI, on a local root.
set -euo pipefail
ROOT="${1:-./data}"
LAKELOG="${LAKELOG:-.venv/bin/lakelog}"
export LAKELOG_ROOT="$ROOT"
if $LAKELOG topics describe demo-clicks --output json >/dev/null 2>&1; then
  echo "demo-clicks is left from an earlier run: deleting it, so that the tour starts from an empty topic"
  $LAKELOG topics delete demo-clicks
fi
$LAKELOG topics create demo-clicks --partitions 3 --config retention.ms=86400000
printf 'alice:home\nbob:cart\nalice:checkout\n' | $LAKELOG produce demo-clicks --key-separator :
$LAKELOG consume demo-clicks --from earliest
$LAKELOG topics describe demo-clicks
