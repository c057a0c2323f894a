#!/usr/bin/env bash
# The slowest tests of a nextest run, from its JUnit report: seconds, binary, test.
#   scripts/slowest-tests.sh [JUNIT] [COUNT]   (default: the ci profile's report, 15)
set -euo pipefail
cd "$(dirname "$0")/.."
junit="${1:-target/nextest/ci/junit.xml}"
count="${2:-15}"
[ -f "$junit" ] || { echo "no test report at $junit" >&2; exit 1; }
echo "the $count slowest tests (seconds):"
# awk takes the first lines and reads the rest (`head` would end the pipe early: SIGPIPE).
sed -n 's/.*<testcase name="\([^"]*\)" classname="\([^"]*\)".* time="\([0-9.]*\)".*/\3 \2 \1/p' "$junit" |
    sort -rn | awk -v n="$count" 'NR <= n { printf "%8.1f  %s %s\n", $1, $2, $3 }'
