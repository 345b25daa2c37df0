// SPDX-License-Identifier: MIT
// PipeDream's reference optimizer (optimizer_graph_hierarchical.py) as implemented, antichain states included.
#pragma once

#include <stop_token>

#include "partitioner.h"

namespace pw::planner {

PartitionResult partitionPipeDreamReference(const PartitionRequest& request, const ProgressFn& progress,
                                            std::stop_token stop);

} // namespace pw::planner
