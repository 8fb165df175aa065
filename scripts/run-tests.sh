#!/usr/bin/env bash
# Runs the lit suite (which includes the unit tests) and prints the summed
# result as its last line: "N passed, N failed, N skipped".
set -uo pipefail
BUILD_DIR=${1:-build}
LIT=/usr/lib/llvm-22/bin/lit
out=$(mktemp)
"$LIT" -v "$BUILD_DIR/test" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
count() { grep -E "^\s*$1\s*:\s*[0-9]+" "$out" | awk -F: '{s+=$2} END {print s+0}'; }
passed=$(( $(count Passed) + $(count "Expectedly Failed") ))
failed=$(( $(count Failed) + $(count "Unexpectedly Passed") + $(count Unresolved) + $(count "Timed Out") ))
skipped=$(( $(count Unsupported) + $(count Skipped) + $(count Excluded) ))
rm -f "$out"
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
echo "$passed passed, $failed failed, $skipped skipped"
exit "$rc"
