#!/usr/bin/env bash
# A short tour of the log core through the CLI, on a local root.
set -euo pipefail
ROOT="${1:-./data}"
LAKELOG="${LAKELOG:-.venv/bin/lakelog}"
export LAKELOG_ROOT="$ROOT"
$LAKELOG topics create demo-clicks --partitions 3 --config retention.ms=86400000 2>/dev/null || true
printf 'alice:home\nbob:cart\nalice:checkout\n' | $LAKELOG produce demo-clicks --key-separator :
$LAKELOG consume demo-clicks --from earliest
$LAKELOG topics describe demo-clicks
