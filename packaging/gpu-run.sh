#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs one program of a GPU bundle (packaging/gpu-bundle.sh copies this file into it as run.sh): bin/NAME with
# this machine's CUDA libraries on the library path. On the GPU machine cuBLAS, cuBLASLt, NCCL and cuDNN are
# PyTorch's wheels, not the toolkit's (../shared/docs/gpu.md), so python3 is asked where they are; the toolkit's
# lib64 comes after them. The bundle's own libraries (lib/) are found through the programs' RPATH
# ($ORIGIN/../lib), not through LD_LIBRARY_PATH, so that a python3 a program starts (PyTorch, for a benchmark's
# baseline) keeps loading its own OpenSSL, zlib and OpenMP.
#   run.sh NAME [ARGS...]      e.g. run.sh pipewright-agent --capabilities
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ $# -lt 1 ] || [ ! -x "$here/bin/$1" ]; then
  echo "usage: $0 NAME [ARGS...]   NAME: one of $(ls "$here/bin" | tr '\n' ' ')" >&2
  exit 2
fi

# The directories of PyTorch's NVIDIA wheels (empty where python3 or the wheels are missing).
dirs=$(python3 -c 'import nvidia, glob, os; print(":".join(sorted({os.path.dirname(f) for r in nvidia.__path__ for f in glob.glob(r + "/*/lib/*.so*")})))' 2>/dev/null || true)
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ -d "$cuda/lib64" ]; then dirs=${dirs:+$dirs:}$cuda/lib64; fi
export LD_LIBRARY_PATH=$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Scripts the programs run (the PyTorch oracle and baselines) travel in src/, laid out as in the repository.
if [ -d "$here/src" ]; then export PW_SOURCE_DIR=${PW_SOURCE_DIR:-$here/src}; fi
exec "$here/bin/$1" "${@:2}"
