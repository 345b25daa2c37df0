#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The one command for a GPU machine: runs what packaging/gpu-bundle.sh built here, on the GPU there, and prints a
# short summary table last. Parts, each under `timeout`, all in under 9 minutes:
#   1. the GPU (nvidia-smi's line for each device);
#   2. the CUDA tests (bin/pw_cuda_tests, Catch2's XML report: passed, failed, and skipped where a test printed
#      "[pw-skip] why", tests/skip.h);
#   3. torch.distributed.pipelining: the exported CSVs through PyTorch's own validator, the demo plan run by its
#      runtime on the GPU with the profiler on, and those traces imported (LOG_DIR/traces);
#   4. the NCCL transport's bandwidth (bin/bench_transport --nccl), then each GPU benchmark of the bundle
#      (bin/bench_gpu_*), whose key lines the summary repeats.
# Exit status: 0 when every test passed or was skipped and every benchmark ended well, 1 otherwise (a failed test,
# a crash, a timeout, a missing test program). Without a GPU (this works on the CPU build machine too) the tests
# skip themselves and the summary says "no GPU: N tests skipped".
#   gpu-check.sh [LOG_DIR]     (default: gpu-check-logs beside the bundle, build/gpu-check-logs in a checkout)
# Run it from the unpacked bundle (BUNDLE/gpu-check.sh) or from a repository checkout (packaging/gpu-check.sh),
# which uses $PW_BUNDLE, else build/gpu-bundle (unpacking build/gpu-bundle.tar.xz first when only that is there).
# Budgets in seconds (environment): PW_GPU_CHECK_BUDGET (total, default 510), PW_GPU_TEST_TIMEOUT (default 240).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -x "$here/run.sh" ] && [ -d "$here/bin" ]; then
  bundle=$here
else
  bundle=${PW_BUNDLE:-$here/../build/gpu-bundle}
  if [ ! -d "$bundle" ] && [ -f "$bundle.tar.xz" ]; then
    echo "gpu-check: unpacking $bundle.tar.xz"
    tar -C "$(dirname "$bundle")" -xJf "$bundle.tar.xz" || exit 1
  fi
fi
if [ ! -x "$bundle/run.sh" ]; then
  echo "gpu-check: no bundle at $bundle: build one with packaging/gpu-bundle.sh (or set PW_BUNDLE)" >&2
  exit 2
fi
bundle=$(cd "$bundle" && pwd)
logs=$(realpath -m "${1:-$(dirname "$bundle")/gpu-check-logs}")
mkdir -p "$logs" || exit 2

budget=${PW_GPU_CHECK_BUDGET:-510}
test_timeout=${PW_GPU_TEST_TIMEOUT:-240}
started=$(date +%s)
elapsed() { echo $(($(date +%s) - started)); }
left() { echo $((budget - $(elapsed))); }
status=0
rows=() # the summary table, "part|result"

# 1. The GPU.
echo "== GPU"
gpu_line=""
if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 20 nvidia-smi >"$logs/nvidia-smi.log" 2>&1
  gpu_line=$(timeout 20 nvidia-smi --query-gpu=index,name,memory.total,driver_version,compute_cap \
    --format=csv,noheader 2>>"$logs/nvidia-smi.log")
fi
if [ -n "$gpu_line" ]; then
  echo "$gpu_line"
  while IFS= read -r line; do rows+=("GPU|$line"); done <<<"$gpu_line"
else
  echo "no GPU: nvidia-smi is missing or found no device (see $logs/nvidia-smi.log)"
  rows+=("GPU|none (nvidia-smi missing or no device)")
fi

# 2. The CUDA tests. Catch2's XML reporter writes each test case as it ends, so a crash or a timeout still leaves
# the cases before it; one left open is counted as failed.
tests_exe=$bundle/bin/pw_cuda_tests
if [ -x "$tests_exe" ]; then
  t=$test_timeout
  if [ "$t" -gt $(($(left) - 60)) ]; then t=$(($(left) - 60)); fi
  echo "== CUDA tests (pw_cuda_tests, timeout ${t} s; log $logs/cuda-tests.xml)"
  t0=$(date +%s)
  timeout --kill-after=10 "$t" "$bundle/run.sh" pw_cuda_tests -r xml -o "$logs/cuda-tests.xml" \
    >"$logs/cuda-tests.log" 2>&1
  rc=$?
  touch "$logs/cuda-tests.xml"
  secs=$(($(date +%s) - t0))
  counts=$(awk '
    /<TestCase / { open = 1; skip = 0; ok = ""; match($0, /name="[^"]*"/); name = substr($0, RSTART + 6, RLENGTH - 7) }
    /<OverallResult success="true"/ { ok = "true" }
    /<OverallResult success="false"/ { ok = "false" }
    /\[pw-skip\]/ { if (open) skip = 1 }
    /<\/TestCase>/ {
      if (ok == "false") { failed++; print "FAILED: " name > "/dev/stderr" }
      else if (skip) skipped++
      else passed++
      open = 0
    }
    END {
      if (open) { failed++; print "UNFINISHED: " name > "/dev/stderr" }
      printf "%d %d %d\n", passed, failed, skipped
    }' "$logs/cuda-tests.xml" 2>"$logs/cuda-tests.failed")
  read -r passed failed skipped <<<"$counts"
  passed=${passed:-0} failed=${failed:-0} skipped=${skipped:-0}
  cat "$logs/cuda-tests.failed"
  if [ -n "$gpu_line" ]; then
    result="$passed passed, $failed failed, $skipped skipped (${secs} s)"
  else
    result="no GPU: $skipped tests skipped, $passed passed, $failed failed (${secs} s)"
  fi
  if [ "$failed" -gt 0 ]; then status=1; fi
  # A GPU that nvidia-smi sees but the tests skipped (no device visible to CUDA: a driver or library mismatch)
  # checked nothing: that is a failure there, not a pass.
  if [ -n "$gpu_line" ] && [ "$skipped" -gt 0 ] && [ "$passed" -eq 0 ]; then
    result="$result: the GPU is there but CUDA saw none (see cuda-tests.log)"
    status=1
  fi
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    result="$result, TIMED OUT after ${t} s"
    status=1
  elif [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
    result="$result, exit status $rc (see cuda-tests.log)"
    status=1
  fi
  if [ "$((passed + failed + skipped))" -eq 0 ]; then
    result="no test ran (exit status $rc, see cuda-tests.log)"
    status=1
  fi
  echo "$result"
  rows+=("CUDA tests|$result")
else
  echo "== CUDA tests: $tests_exe is missing (the bundle was built from a tree without pw_cuda_tests)"
  rows+=("CUDA tests|missing: no bin/pw_cuda_tests in the bundle")
  status=1
fi

# 2b. torch.distributed.pipelining (PyTorch there, 2.4 or later), at most 150 s: every exported torchtitan CSV of the
# golden files through PyTorch's own parser, validator and dry run (tests/oracle/check_pipelining_csv.py); the demo
# plan's CSV run by PyTorch's own runtime with its profiler on, on the GPU (tests/oracle/pipelining_run.py: 3 steps,
# 4 microbatches, LOG_DIR/traces/rank*.json); those traces imported by pipewright-cli history import-trace into
# LOG_DIR/traces/history.sqlite, every action matched or the import refused. Copy LOG_DIR/traces back to commit them.
src=$bundle/src
t=$(($(left) - 60 < 150 ? $(left) - 60 : 150)) # the NCCL and benchmark parts keep at least 60 s
if [ "$t" -lt 30 ]; then
  echo "== torch.distributed.pipelining: not run, $(left) s left of the ${budget} s budget"
  rows+=("pipelining|not run: out of time")
  status=1
elif [ -f "$src/tests/oracle/check_pipelining_csv.py" ] \
  && python3 -c 'import torch.distributed.pipelining' >"$logs/pipelining-import.log" 2>&1; then
  echo "== torch.distributed.pipelining (timeout ${t} s; logs $logs/pipelining-*.log)"
  t0=$(date +%s)
  csvs=("$src"/tests/data/exports/*/torchtitan/schedule.csv)
  timeout --kill-after=5 "$t" python3 "$src/tests/oracle/check_pipelining_csv.py" "${csvs[@]}" \
    >"$logs/pipelining-csv.log" 2>&1
  rc=$?
  ok=$(grep -c '^ok: ' "$logs/pipelining-csv.log")
  grep -E '^(ok: |PyTorch refused)' "$logs/pipelining-csv.log" | sed "s|$src/||" \
    | sed -E 's|^ok: ([^;]*);.*\(([^()]*)\)$|ok: \2: \1|' | cut -c1-160
  result="$ok of ${#csvs[@]} CSVs accepted by PyTorch's validator and dry run"
  if [ "$rc" -ne 0 ] || [ "$ok" -ne ${#csvs[@]} ]; then result="$result (exit status $rc)"; status=1; fi
  rows+=("pipelining CSVs|$result")
  cuda=""
  if [ -n "$gpu_line" ]; then cuda="--cuda"; fi
  rm -rf "$logs/traces"
  t=$((t - ($(date +%s) - t0)))
  if [ "$t" -lt 10 ]; then t=10; fi # `timeout 0` would not time out at all
  timeout --kill-after=5 "$t" python3 "$src/tests/oracle/pipelining_run.py" \
    "$src/tests/data/exports/gpt2-tiny-local/torchtitan/schedule.csv" 4 3 "$logs/traces" $cuda \
    >"$logs/pipelining-run.log" 2>&1
  rc=$?
  tail -n 3 "$logs/pipelining-run.log"
  if [ "$rc" -eq 0 ] && [ -f "$logs/traces/rank0.json" ] && [ -f "$logs/traces/rank1.json" ]; then
    "$bundle/run.sh" pipewright-cli history import-trace "$src/resources/demo/gpt2-tiny-local.plan.json" \
      "$logs/traces/rank0.json" "$logs/traces/rank1.json" --history "$logs/traces/history.sqlite" \
      >"$logs/pipelining-import.log" 2>&1
    rc=$?
    head -n 20 "$logs/pipelining-import.log"
    if [ "$rc" -eq 0 ]; then
      "$bundle/run.sh" pipewright-cli history show latest --history "$logs/traces/history.sqlite" \
        >"$logs/pipelining-show.log" 2>&1
      result="traces ${cuda:+on the GPU }imported: $(grep -m 1 -o '[0-9]* steps, [0-9]* actions matched' "$logs/pipelining-import.log")"
    else
      result="import-trace refused the traces (exit status $rc, see pipelining-import.log)"
      status=1
    fi
  else
    result="pipelining_run.py failed (exit status $rc, see pipelining-run.log)"
    status=1
  fi
  echo "$result ($(($(date +%s) - t0)) s)"
  rows+=("pipelining run|$result")
else
  echo "== torch.distributed.pipelining: not importable by python3 here (see $logs/pipelining-import.log)"
  rows+=("pipelining|not run: python3 has no torch.distributed.pipelining (PyTorch 2.4 or later)")
fi

# 2b. The NCCL transport's bandwidth (bench_transport --nccl: nccl-tests' columns; between GPUs only where there are
# two or more), at most 90 s. NCCL is PyTorch's wheel there: run.sh puts its lib folder in LD_LIBRARY_PATH.
if [ -x "$bundle/bin/bench_transport" ]; then
  t=$(($(left) < 90 ? $(left) : 90))
  echo "== NCCL transport (bench_transport --nccl, timeout ${t} s; log $logs/bench_transport_nccl.log)"
  t0=$(date +%s)
  timeout --kill-after=10 "$t" "$bundle/run.sh" bench_transport --nccl --max-bytes 268435456 \
    >"$logs/bench_transport_nccl.log" 2>&1
  rc=$?
  secs=$(($(date +%s) - t0))
  tail -n 30 "$logs/bench_transport_nccl.log"
  case $rc in
    0) result="ok (${secs} s)" ;;
    124 | 137) result="TIMED OUT after ${t} s"; status=1 ;;
    *) result="exit status $rc (${secs} s)"; status=1 ;;
  esac
  rows+=("NCCL bandwidth|$result")
  while IFS= read -r line; do
    rows+=("  |$line")
  done < <(grep -E '^(# NCCL|\[pw-skip\]|256 MiB|64 MiB)' "$logs/bench_transport_nccl.log" | cut -c1-110)
fi

# 3. The GPU benchmarks, in what is left of the budget. Their key lines: which kernels ran attention (cuDNN's or
# the engine's own) and their times side by side, throughput, MFU, the ratios against PyTorch, their skip notes.
benches=()
for b in "$bundle"/bin/bench_gpu*; do [ -x "$b" ] && benches+=("$(basename "$b")"); done
if [ ${#benches[@]} -eq 0 ]; then
  echo "== GPU benchmark: none in the bundle"
  rows+=("benchmark|none in the bundle")
fi
for i in "${!benches[@]}"; do
  b=${benches[$i]}
  t=$(($(left) / (${#benches[@]} - i)))
  if [ "$t" -lt 20 ]; then
    echo "== $b: not run, ${t} s left of the ${budget} s budget"
    rows+=("$b|not run: out of time")
    status=1
    continue
  fi
  echo "== $b (timeout ${t} s; log $logs/$b.log)"
  t0=$(date +%s)
  # From the bundle's src/: a benchmark built elsewhere finds its PyTorch script under the working directory.
  (cd "$bundle/src" 2>/dev/null || cd "$bundle" && timeout --kill-after=10 "$t" "$bundle/run.sh" "$b") \
    >"$logs/$b.log" 2>&1
  rc=$?
  secs=$(($(date +%s) - t0))
  tail -n 25 "$logs/$b.log"
  case $rc in
    0) result="ok (${secs} s)" ;;
    124 | 137) result="TIMED OUT after ${t} s"; status=1 ;;
    *) result="exit status $rc (${secs} s)"; status=1 ;;
  esac
  rows+=("$b|$result")
  while IFS= read -r line; do
    rows+=("  |$line")
  done < <(grep -E '^  attention: |own / cuDNN|tok(ens)?/s|MFU|TFLOP|[0-9.]+ ?x |vs\.? |pw-skip|skipped|no GPU|no CUDA|peak|predicted' "$logs/$b.log" | tail -n 16 | cut -c1-110)
done

# The summary, last.
total=$(elapsed)
rows+=("total|${total} s of a ${budget} s budget; logs in $logs")
if [ "$status" -ne 0 ]; then rows+=("status|FAIL")
elif [ -z "$gpu_line" ]; then rows+=("status|PASS without a GPU: nothing was checked on one")
else rows+=("status|PASS"); fi
{
  echo
  echo "== gpu-check summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), bundle $bundle)"
  for row in "${rows[@]}"; do
    printf '%-18s %s\n' "${row%%|*}" "${row#*|}"
  done
} | tee "$logs/summary.txt"
exit "$status"
