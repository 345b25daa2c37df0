#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs the Debian 12 packages Pipewright builds and tests against, when they are missing.
# Safe to run repeatedly: it does nothing when everything is present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config clang-format
  nlohmann-json3-dev libcli11-dev catch2 libsqlite3-dev libssh-dev libssl-dev libgloo-dev libopenblas-dev
  qt6-base-dev qt6-svg-dev libqcustomplot-dev libgl-dev
  openssh-server openssh-client xvfb xauth
  lintian appstream man-db file # the Debian package's checks (packaging/deb.sh, tests/packaging)
  slurm-wlm munge # the Slurm launcher's tests start their own slurmctld, slurmd and munged (tests/slurm)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup-deps: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"
