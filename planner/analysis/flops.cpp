// SPDX-License-Identifier: MIT
#include "flops.h"

#include <algorithm>
#include <set>
#include <string>

#include "../physical_gpu.h"
#include "../transformer_shape.h"

namespace pw::planner {

double transformerFlops(const TransformerConfig& c, double batch, Recompute recompute)
{
    // Forward, backward (2x) and with recomputation the blocks' forward again (full) or their attention core
    // (selective); the logits are not recomputed.
    const double blocks = c.layers * blockForwardFlops(c, batch);
    double again = 0;
    if (recompute == Recompute::Full)
        again = blocks;
    else if (recompute == Recompute::Selective)
        again = c.layers * attentionCoreFlops(c, batch);
    return 3 * blocks + again + 3 * headForwardFlops(c, batch);
}

std::optional<double> modelFlopsPerSample(const ModelProfile& model, Recompute recompute)
{
    if (model.architecture)
        return transformerFlops(*model.architecture, 1, recompute);
    double forward = 0;
    bool any = false;
    for (const auto& layer : model.layers)
        if (layer.forward_flops) {
            forward += *layer.forward_flops;
            any = true;
        }
    if (!any)
        return std::nullopt;
    // Without an architecture nothing says which FLOPs are the attention core: selective recomputes none of them.
    return (recompute == Recompute::Full ? 4 : 3) * forward / std::max(1, model.microbatch_size);
}

std::optional<FlopsReport> flopsReport(const Plan& plan, double throughput_samples_per_s)
{
    const auto model = modelFlopsPerSample(plan.model, Recompute::None);
    const auto hardware = modelFlopsPerSample(plan.model, plan.schedule.recompute);
    if (!model || !hardware)
        return std::nullopt;
    std::set<int> devices;
    for (const auto& st : plan.stages)
        devices.insert(st.devices.begin(), st.devices.end());
    // Devices that share a GPU (several stages on one card) share its peak: the utilisation is the card's.
    std::set<std::string> gpus;
    double peak = 0;
    for (int d : devices)
        if (const auto gpu = physicalGpu(*plan.cluster, d); !gpu || gpus.insert(*gpu).second)
            peak += plan.cluster->typeOf(d).peak_tflops * 1e12;
    const auto cpus
        = std::count_if(devices.begin(), devices.end(), [&](int d) { return !physicalGpu(*plan.cluster, d); });
    const int chips = static_cast<int>(cpus) + static_cast<int>(gpus.size());
    const double n = std::max(1, chips);
    const int size = plan.schedule.microbatch_size > 0 ? plan.schedule.microbatch_size : plan.model->microbatch_size;
    FlopsReport r;
    r.gpus = chips;
    r.devices = static_cast<int>(devices.size());
    r.model_flops_per_sample = *model;
    r.hardware_flops_per_sample = *hardware;
    r.model_flops_per_iteration = *model * plan.schedule.microbatches * std::max(1, size);
    r.model_flops_per_s_per_gpu = *model * throughput_samples_per_s / n;
    r.hardware_flops_per_s_per_gpu = *hardware * throughput_samples_per_s / n;
    r.peak_flops_per_s_per_gpu = peak / n;
    if (peak > 0) {
        r.mfu = r.model_flops_per_s_per_gpu / r.peak_flops_per_s_per_gpu;
        r.hfu = r.hardware_flops_per_s_per_gpu / r.peak_flops_per_s_per_gpu;
    }
    return r;
}

} // namespace pw::planner
