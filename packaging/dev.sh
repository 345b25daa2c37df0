#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One entry point for people and CI: installs what is missing, builds, then runs the job asked for.
#   demo   build and run `pipewright-cli demo` on the bundled demo
#   test   build everything and run every test (what .ci/run calls)
#   bench  build optimised and run the benchmarks in tests/bench
#   asan   build with AddressSanitizer + UBSan and run every test
set -euo pipefail
cd "$(dirname "$0")/.."

job=${1:-}
case "$job" in demo|test|bench|asan) ;; *) echo "usage: $0 demo|test|bench|asan" >&2; exit 2 ;; esac

bash packaging/setup-deps.sh

export QT_QPA_PLATFORM=${QT_QPA_PLATFORM:-offscreen}
jobs=$(nproc 2>/dev/null || echo 2)
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi

configure() { # preset
  cmake --preset "$1" >/dev/null
}

case "$job" in
  demo)
    configure dev
    cmake --build build/dev --target pipewright-cli -j"$jobs"
    build/dev/app/pipewright-cli demo
    ;;
  test)
    configure dev
    cmake --build build/dev -j"$jobs"
    ctest --test-dir build/dev --output-on-failure --no-tests=error -j"$jobs"
    ;;
  bench)
    configure release
    cmake --build build/release -j"$jobs"
    for b in build/release/tests/bench/bench_*; do
      [ -x "$b" ] && "$b"
    done
    ;;
  asan)
    configure asan
    cmake --build build/asan -j"$jobs"
    ctest --test-dir build/asan --output-on-failure --no-tests=error -j"$jobs"
    ;;
esac
