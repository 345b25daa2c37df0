// SPDX-License-Identifier: MIT
// The bundled demo: where its files live and the project the desktop app opens on first start.
#pragma once

#include <string>

#include "project.h"

namespace pw::app {

/// Where the bundled demo lives: $PIPEWRIGHT_DEMO_DIR, the share folder beside an installed executable
/// (../share/pipewright/demo), or the source tree.
/// Throws InputError when none holds it.
std::string demoDirectory();

/// The demo project: the bundled 355M GPT on one DGX H100, planned by PipeDream for 1F1B with 16 microbatches,
/// with scenarios to compare (straight pipelines under GPipe, 1F1B and interleaved 1F1B, and Megatron's plan).
Project demoProject();

} // namespace pw::app
