#!/bin/sh
# `pnpm bench` (see bench/src/main.ts for the options).
# - Open files: 10k subscribed sockets are 10k descriptors in one server process (and a share in each
#   client process), so the soft limit is raised to the hard limit, or higher where allowed (root with
#   CAP_SYS_RESOURCE). The limit in effect is recorded in the results.
# - DATABASE_URL / REDIS_URL default to the local servers, as .ci/run does.
set -eu
cd "$(dirname "$0")/.."
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
BENCH_ULIMIT_N="$(ulimit -n)"
export BENCH_ULIMIT_N
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
exec node --import tsx bench/src/main.ts "$@"
