// SPDX-License-Identifier: MIT
// Which physical GPU a cluster's device trains on, for everything that must know when devices share one: the
// simulator (their computations take turns on it) and the run controller (one agent drives them, over a device
// fabric). Decided by the cluster's explicit fields (a node's `gpus` and its CUDA_VISIBLE_DEVICES), never by a
// device type's name.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cluster.h"

namespace pw::planner {

/// A key equal for devices sharing one GPU: the device's node's host (its name when it has none) and the GPU after
/// the node's CUDA_VISIBLE_DEVICES (an index or a UUID of the mask, or the index itself without one); nullopt for a
/// device whose node lists no `gpus` (the CPU).
std::optional<std::string> physicalGpu(const Cluster& cluster, int device);

/// Per device of `devices`' index range (0..cluster.deviceCount()): the index of the GPU it shares with other
/// devices among `devices`, numbered from 0 in order of first appearance; -1 for a device that shares none.
std::vector<int> sharedGpus(const Cluster& cluster, const std::vector<int>& devices);

} // namespace pw::planner
