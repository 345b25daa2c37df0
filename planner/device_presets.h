// SPDX-License-Identifier: MIT
// Known device types: memory, peak dense throughput, memory bandwidth, price.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "cluster.h"

namespace pw::planner {

/// H100, H200, A100, V100, the GPUs of HetPipe's Table 1 (TITAN V, TITAN RTX, RTX 2060, Quadro P4000),
/// and "cpu" (a measured guess for this kind of machine). Names match case-insensitively.
const std::vector<DeviceType>& devicePresets();
std::optional<DeviceType> devicePreset(std::string_view name);
/// Bytes per element a profile for `device` takes by default: what the engine trains in there, 4 (fp32) on the
/// "cpu" preset's type, whose engine trains fp32 only, and 2 (bf16 mixed precision) on every accelerator.
int defaultBytesPerElement(const DeviceType& device);
/// The dense FP8 peak of `device`: its own peak_fp8_tflops, else (0: not given, as in cluster files written before
/// the field) the preset's of its name, else 0 (no FP8 tensor cores).
double peakFp8Tflops(const DeviceType& device);

} // namespace pw::planner
