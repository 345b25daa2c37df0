#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One entry point for people and CI: installs what is missing, builds, then runs the job asked for.
#   demo   build and open the desktop app on the bundled demo project (without a display: the CLI demo, and
#          screenshots of every view in build/screenshots/)
#   test   build everything and run every test (what .ci/run calls), the agent preset's configuration among them
#   bench  build optimised and run the benchmarks in tests/bench
#   asan   build with AddressSanitizer + UBSan and run every test
set -euo pipefail
cd "$(dirname "$0")/.."

job=${1:-}
case "$job" in demo|test|bench|asan) ;; *) echo "usage: $0 demo|test|bench|asan" >&2; exit 2 ;; esac

bash packaging/setup-deps.sh

jobs=$(nproc 2>/dev/null || echo 2)
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi

configure() { # preset
  cmake --preset "$1" >/dev/null
}

# Tests and benchmarks draw widgets offscreen; only the demo may open a window.
if [ "$job" != demo ]; then export QT_QPA_PLATFORM=${QT_QPA_PLATFORM:-offscreen}; fi

case "$job" in
  demo)
    configure dev
    cmake --build build/dev --target pipewright pipewright-cli pipewright-agent -j"$jobs"
    if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then
      exec build/dev/app/pipewright --demo
    fi
    echo "No display: here is the demo from the command line, and a screenshot of every view of the app."
    build/dev/app/pipewright-cli demo
    echo
    echo "Training the bundled tiny GPT-2 (2 pipeline stages, 1F1B) with two local agents; the run lands in the"
    echo "history in your data directory:"
    build/dev/app/pipewright-cli run resources/demo/gpt2-tiny-local.plan.json --local --steps 50 --lr 1e-3
    mkdir -p build/screenshots
    for view in model cluster partition gantt memory scenarios; do
      build/dev/app/pipewright --demo --view "$view" --screenshot "build/screenshots/$view.png"
    done
    build/dev/app/pipewright --project resources/demo/gpt2-tiny-local.pwproj --view run --open-run latest \
      --screenshot build/screenshots/run.png
    build/dev/app/pipewright --project resources/demo/gpt2-tiny-local.pwproj --view history \
      --screenshot build/screenshots/history.png
    echo "Open the app on a desktop with: build/dev/app/pipewright   (or under Xvfb: xvfb-run build/dev/app/pipewright)"
    ;;
  test)
    # Each step's wall time, so that a change to the build is measured on the machine it runs on (docs/build.md).
    step_start=$SECONDS
    step() { echo "dev.sh: $1 took $((SECONDS - step_start)) s"; step_start=$SECONDS; }
    configure dev
    cmake --build build/dev -j"$jobs"
    step "the dev build"
    ctest --test-dir build/dev --output-on-failure --no-tests=error -j"$jobs"
    step "the dev tests"
    # The agent preset (a GPU server's build: no Qt, SQLite or libssh) is checked by the dev tests themselves
    # (tests/repo/test_agent_preset.cpp: it configures with those packages disabled, and the agent links none of
    # them); building it again here compiled the same planner and engine a second time (417 s of 32 min).
    ;;
  bench)
    # Idle OpenMP threads sleep instead of spinning (the agents' default too: see app/run/controller.cpp), so that
    # in-process runs, agents and PyTorch are measured alike on a machine shared with other work.
    export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
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
