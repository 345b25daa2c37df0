#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds here what a GPU server runs and collects it into one folder that needs, there, only an NVIDIA driver and
# the CUDA libraries (../shared/docs/gpu.md: no Qt, libssh, OpenBLAS, Gloo or nlohmann-json on the GPU machine, so
# it unpacks this instead of building). The folder holds:
#   bin/   pipewright-agent, pipewright-cli (no Qt: the CLI is the controller without the desktop app), the CUDA
#          tests (pw_cuda_tests, the NCCL transport's among them), the GPU benchmarks (tests/bench/bench_gpu_*) and
#          bench_transport (its --nccl mode), Release, sm_80 + sm_90, stripped
#   lib/   every shared library they load (ldd) but glibc's, libstdc++/libgcc_s (the GPU machine's are newer than
#          Debian 12's, so ours would only be older copies) and the NVIDIA driver's and CUDA's (libcuda, cudart,
#          cuBLAS, NCCL, cuDNN: there they are PyTorch's wheels). The programs find lib/ through their RPATH
#          ($ORIGIN/../lib, DT_RPATH so that it also serves the libraries' own dependencies).
#   run.sh (packaging/gpu-run.sh), gpu-check.sh (packaging/gpu-check.sh), src/ (the Python scripts the tests and
#          benchmarks start, the exported torchtitan CSVs and the demo plan gpu-check.sh hands PyTorch), MANIFEST (what was built from which commit, and each program's libraries)
# and beside it OUT_DIR.tar.xz, the same folder compressed: the device tool carries at most 64 MiB, which the
# folder (OpenBLAS alone is 35 MiB) can exceed.
#   packaging/gpu-bundle.sh [OUT_DIR]    (default build/gpu-bundle; the build itself is in build/gpu-bundle-build)
# Then, on the GPU machine: `OUT_DIR/gpu-check.sh LOG_DIR`, or `OUT_DIR/run.sh pipewright-agent --capabilities`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

out=$(realpath -m "${1:-build/gpu-bundle}")
build=$(realpath -m "${PW_BUNDLE_BUILD_DIR:-build/gpu-bundle-build}")
jobs=${PW_JOBS:-$(nproc 2>/dev/null || echo 2)}
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ -x "$cuda/bin/nvcc" ]; then export PATH=$cuda/bin:$PATH; fi

# The folder is emptied first: refuse a folder that is not an earlier bundle (a typo must not wipe anything else).
if [ -e "$out" ] && [ ! -f "$out/MANIFEST" ]; then
  echo "gpu-bundle: $out exists and is not a bundle (no MANIFEST): choose another OUT_DIR" >&2
  exit 2
fi
case "$out" in "$root" | "$root/" | / | "$HOME") echo "gpu-bundle: refusing OUT_DIR $out" >&2; exit 2 ;; esac

started=$(date +%s)
# Release with CUDA required (a bundle without kernels is of no use on a GPU); no desktop app. The install RPATH is
# used in the build tree already, so the binaries copied out need no patching; --disable-new-dtags makes it a
# DT_RPATH, which the dynamic loader also uses for the dependencies of OpenBLAS, libssh, ... (a DT_RUNPATH is not).
# shellcheck disable=SC2016 # $ORIGIN is for the dynamic loader, not for this shell
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPW_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="80;90" \
  -DPW_BUILD_CONTROLLER=ON -DPW_BUILD_CLI=ON -DPW_BUILD_UI=OFF -DPW_BUILD_TESTS=ON \
  -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON '-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib' \
  -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log" >&2; exit 1; }

# What to build: the agent, the CLI, the CUDA tests and every GPU benchmark whose target exists in this tree.
all_targets=$(cmake --build "$build" --target help)
have_target() { grep -q "^$1: " <<<"$all_targets"; }
targets=()
# bench_transport: its --nccl mode measures the NCCL transport on the GPUs (gpu-check.sh runs it).
for t in pipewright-agent pipewright-cli pw_cuda_tests bench_transport; do
  if have_target "$t"; then targets+=("$t"); fi
done
for src in tests/bench/bench_gpu*.cpp; do
  [ -e "$src" ] || continue
  t=$(basename "$src" .cpp)
  if have_target "$t"; then targets+=("$t"); fi
done
for t in pipewright-agent pipewright-cli; do
  if ! printf '%s\n' "${targets[@]}" | grep -qx "$t"; then
    echo "gpu-bundle: no target $t in this configuration" >&2
    exit 1
  fi
done
echo "gpu-bundle: building ${targets[*]} (Release, CUDA sm_80 + sm_90) in $build"
# Test discovery runs the test programs after linking: they need cuBLASLt from the toolkit here (no RPATH to it).
LD_LIBRARY_PATH=$cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} cmake --build "$build" --target "${targets[@]}" -j"$jobs"
built=$(date +%s)

# Libraries that stay the GPU machine's: glibc's, the C++ runtime, the NVIDIA driver's and CUDA's.
system_lib() {
  case "$1" in
    linux-vdso.so* | ld-linux*.so* | libc.so* | libm.so* | libmvec.so* | libpthread.so* | libdl.so* | librt.so* | \
      libresolv.so* | libutil.so* | libanl.so* | libnsl.so* | libstdc++.so* | libgcc_s.so*) return 0 ;;
  esac
  return 1
}
cuda_lib() { # NAME PATH
  case "$1" in
    libcuda.so* | libnvidia-*.so* | libcudart.so* | libcublas*.so* | libnccl*.so* | libcudnn*.so* | libnvJitLink*.so* | \
      libnvrtc*.so* | libcufft*.so* | libcurand*.so* | libcusparse*.so* | libcusolver*.so* | libcupti*.so*) return 0 ;;
  esac
  case "$2" in "$cuda"/* | /usr/local/cuda*/*) return 0 ;; esac
  return 1
}

rm -rf "$out" "$out.tar.xz"
mkdir -p "$out/bin" "$out/lib" "$out/src/tests"
: >"$out/MANIFEST" # marks the folder as a bundle from now on, even if a step below fails
for t in "${targets[@]}"; do
  exe=$(find "$build" -type f -name "$t" -perm -u+x -not -path "*/CMakeFiles/*" -print -quit)
  [ -n "$exe" ] || { echo "gpu-bundle: $t was built but not found under $build" >&2; exit 1; }
  cp "$exe" "$out/bin/$t"
  strip --strip-all "$out/bin/$t"
done

# Every library the programs load, resolved here with the toolkit's on the path (ldd lists them transitively).
export LD_LIBRARY_PATH=$cuda/lib64
for exe in "$out"/bin/*; do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if system_lib "$name" || cuda_lib "$name" "$path"; then continue; fi
    if [ "$path" = "not" ]; then
      echo "gpu-bundle: $(basename "$exe") needs $name, which is not found here" >&2
      exit 1
    fi
    [ -e "$out/lib/$name" ] || cp -L "$path" "$out/lib/$name"
  done < <(ldd "$exe")
done
# Libraries the programs load at run time (dlopen) rather than link, so ldd does not list them: OpenBLAS (the CPU
# engine, engine/openblas.cpp) and libssh (app/launch/libssh.cpp), with what they link. The programs' DT_RPATH
# finds them in lib/ there too.
for soname in libopenblas.so.0 libssh.so.4; do
  # awk reads all of ldconfig's list: leaving early would end ldconfig with SIGPIPE, a failure under pipefail.
  path=$(ldconfig -p | awk -v n="$soname" '$1 == n && /x86-64/ && p == "" { p = $NF } END { if (p != "") print p }')
  [ -n "$path" ] || { echo "gpu-bundle: $soname is not installed here (packaging/setup-deps.sh)" >&2; exit 1; }
  [ -e "$out/lib/$soname" ] || cp -L "$path" "$out/lib/$soname"
  while read -r name arrow dep _; do
    [ "$arrow" = "=>" ] || continue
    if system_lib "$name" || cuda_lib "$name" "$dep"; then continue; fi
    [ -e "$out/lib/$name" ] || cp -L "$dep" "$out/lib/$name"
  done < <(ldd "$path")
done
chmod 0644 "$out"/lib/*

# Check: with the bundle's RPATH every library that is not the GPU machine's own must now come from lib/.
for exe in "$out"/bin/*; do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if system_lib "$name" || cuda_lib "$name" "$path"; then continue; fi
    case "$(realpath -m "$path")" in
      "$out/lib/"*) ;;
      *) echo "gpu-bundle: $(basename "$exe") loads $name from $path, not from the bundle" >&2; exit 1 ;;
    esac
  done < <(ldd "$exe")
done
"$out/bin/pipewright-agent" --version >/dev/null

cp packaging/gpu-run.sh "$out/run.sh"
cp packaging/gpu-check.sh "$out/gpu-check.sh"
chmod 0755 "$out/run.sh" "$out/gpu-check.sh"
cp -r tests/oracle "$out/src/tests/oracle"
# gpu-check.sh's torch.distributed.pipelining part: the exported schedule CSVs, and the demo plan whose CSV it runs
# and whose traces it imports.
for csv in tests/data/exports/*/torchtitan/schedule.csv; do
  mkdir -p "$out/src/$(dirname "$csv")" && cp "$csv" "$out/src/$csv"
done
mkdir -p "$out/src/resources/demo" && cp resources/demo/gpt2-tiny-local.plan.json "$out/src/resources/demo/"
if compgen -G "tests/bench/*.py" >/dev/null; then
  mkdir -p "$out/src/tests/bench" && cp tests/bench/*.py "$out/src/tests/bench/"
fi

{
  echo "pipewright GPU bundle"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(c++ --version | sed -n 1p)"
  echo "cuda: $("$cuda/bin/nvcc" --version | tail -n 1), architectures sm_80 sm_90"
  echo
  for exe in "$out"/bin/*; do
    echo "bin/$(basename "$exe"):"
    ldd "$exe" | sed 's/ (0x[0-9a-f]*)$//; s/^/  /'
  done
} >"$out/MANIFEST"

tar -C "$(dirname "$out")" -cf - "$(basename "$out")" | xz -T0 -6 >"$out.tar.xz"
finished=$(date +%s)

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo
echo "gpu-bundle: $out  ($(mib "$(du -sb "$out" | cut -f1)"))"
for f in "$out"/bin/* "$out"/lib/*; do
  printf '  %-32s %s\n' "${f#"$out"/}" "$(mib "$(stat -c %s "$f")")"
done
size=$(stat -c %s "$out.tar.xz")
echo "gpu-bundle: $out.tar.xz  ($(mib "$size"))"
echo "gpu-bundle: build $((built - started)) s, collect and compress $((finished - built)) s"
if [ "$size" -gt $((64 * 1048576)) ]; then
  echo "gpu-bundle: the compressed bundle is over 64 MiB, more than the device tool carries" >&2
  exit 1
fi
