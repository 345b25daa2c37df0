#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the Debian package pipewright_VERSION_ARCH.deb from an existing build tree with CPack's DEB generator
# (cmake/Packaging.cmake says what goes in; docs/build.md "The Debian package" says what it holds and what it does
# about CUDA), then checks it with lintian.
#   packaging/deb.sh [BUILD_DIR] [--out DIR] [--no-build] [--no-lintian]
#     BUILD_DIR     a configured tree (default build/dev); the package is made from what it built, stripped
#     --out DIR     where the .deb goes (default BUILD_DIR/deb)
#     --no-build    do not bring the three programs up to date first (the tests: ctest must not compile)
#     --no-lintian  skip lintian (otherwise an error (E:) it reports fails the script; warnings are printed)
# The last line it prints is the path of the .deb.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build/dev
out=
do_build=1
do_lintian=1
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?--out wants a folder}; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --no-lintian) do_lintian=0; shift ;;
    -h | --help) sed -n '3,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "deb.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
build=$(realpath -m "$build")
out=$(realpath -m "${out:-$build/deb}")

if [ ! -f "$build/CPackConfig.cmake" ]; then
  echo "deb.sh: $build has no CPackConfig.cmake: configure it first (cmake --preset dev), with the controller" \
       "(PW_BUILD_CONTROLLER=ON: the agent preset makes no package)" >&2
  exit 1
fi
for tool in cpack dpkg-shlibdeps file; do
  command -v "$tool" >/dev/null || { echo "deb.sh: $tool is missing (packaging/setup-deps.sh installs it)" >&2; exit 1; }
done

# The programs the tree has (a tree without the UI packages the CLI and the agent only).
targets=()
for t in pipewright pipewright-cli pipewright-agent; do
  if grep -q "^build $t: phony" "$build/build.ninja" 2>/dev/null; then targets+=(--target "$t"); fi
done
if [ "$do_build" = 1 ] && [ ${#targets[@]} -gt 0 ]; then
  cmake --build "$build" "${targets[@]}"
fi

# CPack installs the tree into a staging folder of its own and packs that; with Ninja it builds nothing itself.
mkdir -p "$out"
rm -f "$out"/pipewright_*.deb
staging=$out/_CPack_Packages
rm -rf "$staging"
cpack --config "$build/CPackConfig.cmake" -G DEB -B "$out"
rm -rf "$staging"

debs=("$out"/pipewright_*.deb)
deb=${debs[0]}
[ -f "$deb" ] || { echo "deb.sh: cpack made no pipewright_*.deb in $out" >&2; exit 1; }
echo "deb.sh: $(du -h "$deb" | cut -f1) $(dpkg-deb -f "$deb" Package Version Architecture | paste -sd' ')"

# CPack runs dpkg-shlibdeps with --ignore-missing-info, which leaves a library that no Debian package provides out
# of Depends without a word. Only NVIDIA's CUDA libraries may be such (docs/build.md: a CUDA tree's package needs
# the toolkit); any other library a program loads must come from a package, or the package is refused.
unpacked=$(mktemp -d)
trap 'rm -rf "$unpacked"' EXIT
dpkg-deb -x "$deb" "$unpacked"
unpackaged=()
for program in "$unpacked"/usr/bin/*; do
  while read -r lib; do
    owned=0
    for candidate in "$lib" "$(realpath "$lib")" "/usr$lib"; do
      if dpkg -S "$candidate" >/dev/null 2>&1; then owned=1; break; fi
    done
    case "$owned:$(basename "$lib")" in
      1:* | 0:libcublas* | 0:libcudart* | 0:libnccl*) ;;
      *) unpackaged+=("$(basename "$program"): $lib") ;;
    esac
  done < <(ldd "$program" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }')
done
if [ ${#unpackaged[@]} -gt 0 ]; then
  printf 'deb.sh: no Debian package provides %s\n' "${unpackaged[@]}" >&2
  exit 1
fi
echo "deb.sh: Depends: $(dpkg-deb -f "$deb" Depends)"

if [ "$do_lintian" = 1 ]; then
  command -v lintian >/dev/null || { echo "deb.sh: lintian is missing (packaging/setup-deps.sh installs it)" >&2; exit 1; }
  # lintian exits non-zero for errors; its report is printed whole either way, then judged by its E: lines.
  report=$(lintian --tag-display-limit 0 "$deb" 2>&1 || true)
  [ -z "$report" ] || printf '%s\n' "$report"
  if printf '%s\n' "$report" | grep -q '^E: '; then
    echo "deb.sh: lintian reports errors (E:) on $deb" >&2
    exit 1
  fi
  echo "deb.sh: lintian: no errors ($(printf '%s\n' "$report" | grep -c '^W: ' || true) warnings)"
fi
echo "$deb"
