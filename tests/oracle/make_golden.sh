#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Regenerates tests/data/golden/gpt2-torch-losses.json: PyTorch's per-step losses (tests/oracle/gpt2_torch.py) for
# the checkpoint, tokens and settings that tests/engine/test_torch_oracle.cpp builds. The test itself writes the
# file (PW_UPDATE_GOLDEN=1), so the inputs recorded in it are exactly the ones the golden test compares against;
# then the golden test runs on the new file. Needs python3-torch (Debian: apt install python3-torch) and a built
# pw_engine_tests (cmake --build build/dev --target pw_engine_tests). Review the diff before committing it.
#
#   tests/oracle/make_golden.sh [BUILD_DIR]      (default build/dev; $PW_PYTHON picks another interpreter)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/dev}
tests=$build/tests/pw_engine_tests
python=${PW_PYTHON:-/usr/bin/python3}

if ! "$python" -c 'import torch' 2>/dev/null; then
    echo "make_golden.sh: $python cannot import torch (Debian: apt install python3-torch)" >&2
    exit 1
fi
if [ ! -x "$tests" ]; then
    echo "make_golden.sh: $tests not built (cmake --build $build --target pw_engine_tests)" >&2
    exit 1
fi
# The live test writes the file, then still checks every plan against PyTorch; the golden test reads it back.
PW_UPDATE_GOLDEN=1 "$tests" "[oracle][torch]"
"$tests" "[oracle][golden]"
git -C "$root" status --short -- tests/data/golden/gpt2-torch-losses.json
git -C "$root" diff --stat -- tests/data/golden/gpt2-torch-losses.json
