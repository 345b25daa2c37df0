// SPDX-License-Identifier: MIT
// The per-kernel timing (engine/kernel_timing.h) on the CPU backend: the timed backend computes what the backend it
// wraps computes, bit for bit; one block's calls are the block's kernels with their shapes; and the work it records
// prices, under the planner's GPU cost model, to what the planner charges a block (the forward exactly, the
// backward's products and attention exactly).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "engine/kernel_timing.h"
#include "engine/model.h"
#include "planner/device_presets.h"
#include "planner/gpu_cost_model.h"

using namespace pw;
using namespace pw::engine;

namespace {

ProfileOptions smallModel()
{
    ProfileOptions o;
    o.shape = {2, 32, 4, 16, 100, 2, 4}; // blocks, hidden, heads, sequence, vocab, microbatch, bytes
    o.repeats = 3;
    o.warmup = 1;
    o.threads = 1;
    return o;
}

/// One forward and backward of `layer` on `backend`: the parameters' gradients and the input's gradient.
std::vector<float> runLayer(Backend& backend, const ProfileOptions& o, int layer)
{
    const ModelConfig config = ModelConfig::fromTransformer(o.shape);
    const BatchShape shape {o.shape.microbatch, o.shape.sequence};
    StageModel model(config, shape, layer, layer, backend);
    model.initialise(7);
    const std::size_t tokens = static_cast<std::size_t>(shape.batch) * shape.seq;
    std::vector<std::int32_t> ids(tokens);
    for (std::size_t i = 0; i < tokens; ++i)
        ids[i] = static_cast<std::int32_t>((i * 37) % static_cast<std::size_t>(config.vocab));
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    std::vector<float> values(model.activationCount());
    for (float& v : values)
        v = normal(rng);
    Buffer x(backend, values.size(), backend.act()), dout(backend, values.size(), backend.act());
    backend.upload(x.data(), x.dtype(), values.data(), values.size());
    backend.upload(dout.data(), dout.dtype(), values.data(), values.size());
    Buffer loss(backend, 1, DType::F32);
    StageStash stash;
    model.forward(stash, model.params().data(), ids, model.hasEmbedding() ? nullptr : &x, ids, 1.0f, loss.as<float>());
    const Buffer* dx
        = model.backward(stash, model.params().data(), model.grads().data(), model.hasHead() ? nullptr : &dout);
    std::vector<float> out = model.hostGrads();
    if (dx) {
        std::vector<float> input(dx->count());
        backend.download(input.data(), dx->data(), dx->dtype(), dx->count());
        out.insert(out.end(), input.begin(), input.end());
    }
    return out;
}

planner::GpuCostModel h100Model()
{
    const planner::DeviceType h100 = *planner::devicePreset("H100");
    return planner::GpuCostModel(h100, nullptr, planner::defaultGpuCurve(h100));
}

double priced(const std::vector<KernelCall>& calls, const planner::GpuCostModel& model, bool withBytes)
{
    double seconds = 0;
    for (KernelCall c : calls) {
        if (!withBytes)
            c.work.bytes = 0;
        seconds += modelSeconds(c, model);
    }
    return seconds;
}

} // namespace

TEST_CASE("the timed backend computes what the backend it wraps computes, bit for bit", "[kernels]")
{
    const ProfileOptions o = smallModel();
    for (int layer : {0, 1, 3}) { // the embedding, a block, the head
        INFO("layer " << layer);
        const auto plain = makeCpuBackend();
        const auto inner = makeCpuBackend();
        TimingBackend timed(*inner);
        const std::vector<float> a = runLayer(*plain, o, layer);
        const std::vector<float> b = runLayer(timed, o, layer);
        REQUIRE(a.size() == b.size());
        CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
        const std::vector<KernelCall> calls = timed.take();
        CHECK_FALSE(calls.empty());
        CHECK(timed.take().empty()); // take() empties
    }
}

TEST_CASE(
    "one block's kernels are its products, attention, norms and element-wise calls with their shapes", "[kernels]")
{
    const ProfileOptions o = smallModel();
    const std::vector<KernelCall> calls = measureLayerKernels(o, 1);
    const auto count = [&](const std::string& kernel) {
        return std::count_if(calls.begin(), calls.end(), [&](const KernelCall& c) { return c.kernel == kernel; });
    };
    CHECK(count("matmul forward") == 4);
    // The fused backward is the block's I then its W: 3 products' input gradients (the MLP's down projection's goes
    // through GELU's backward in its own call), then the 4 weight and bias gradients.
    CHECK(count("matmul backward") == 7);
    CHECK(count("matmul backward GELU") == 1);
    CHECK(count("gelu backward") == 0);
    CHECK(count("zero") == 0); // input gradients are written, nothing zeroed first (issue 33 item 2)
    CHECK(count("attention forward") == 1);
    CHECK(count("attention backward") == 1);
    // The first norm alone; the second joined with the residual before it (issue 33 item 2); the block's output sum.
    CHECK(count("layernorm forward") == 1);
    CHECK(count("residual + layernorm forward") == 1);
    CHECK(count("residual forward") == 1);
    // Each norm's input gradient in the I, joined with the residual's gradient; its weight's in the W. No copies.
    CHECK(count("layernorm backward + residual") == 2);
    CHECK(count("layernorm backward") == 2);
    CHECK(count("copy") == 1); // the stage taking its output's gradient; the block itself copies nothing
    CHECK(count("classifier") == 0);
    // B T = 32 rows, C = 32: QKV, out-projection, MLP up (GELU fused into the call), MLP down, in the block's order.
    std::vector<std::string> forwardShapes;
    for (const auto& c : calls)
        if (c.kernel == "matmul forward")
            forwardShapes.push_back(c.shape);
    CHECK(forwardShapes
        == std::vector<std::string> {
            "32 x 32 -> 96, bias", "32 x 32 -> 32, bias", "32 x 32 -> 128, bias, GELU", "32 x 128 -> 32, bias"});
    double total = 0;
    for (const auto& c : calls) {
        CHECK(c.seconds >= 0);
        total += c.seconds;
    }
    CHECK(total > 0);
    // The head's calls: its layer norm, the logits product over the vocabulary (100 columns on the CPU), the loss.
    const std::vector<KernelCall> head = measureLayerKernels(o, 3);
    CHECK(std::any_of(head.begin(), head.end(), [](const KernelCall& c) { return c.kernel == "classifier"; }));
    CHECK(std::any_of(head.begin(), head.end(), [](const KernelCall& c) { return c.shape == "32 x 32 -> 100"; }));
    CHECK_THROWS_AS(measureLayerKernels(o, 4), std::invalid_argument);
}

TEST_CASE("a block's kernels price to the planner's block estimate under the same cost model", "[kernels]")
{
    ProfileOptions o = smallModel();
    o.shape = {2, 64, 4, 32, 100, 2, 4}; // fp32: the CPU's element
    o.repeats = 1;
    o.warmup = 0;
    const std::vector<KernelCall> calls = measureLayerKernels(o, 1);
    const auto model = h100Model();
    const planner::LayerEstimate block = planner::transformerBlockEstimate(o.shape, model);
    // The forward: the 4 products, the attention and the planner's 18 tensors of memory traffic but one: the
    // residual joined with the second norm reads its sum once less than the unfused calls the planner counts.
    const auto firstBackward = std::find_if(calls.begin(), calls.end(), [](const KernelCall& c) { return c.backward; });
    CHECK(std::none_of(firstBackward, calls.end(), [](const KernelCall& c) { return !c.backward; }));
    const std::vector<KernelCall> forward(calls.begin(), firstBackward), backward(firstBackward, calls.end());
    const double tensor
        = static_cast<double>(o.shape.microbatch) * o.shape.sequence * o.shape.hidden * o.shape.bytes_per_element;
    CHECK(priced(forward, model, true) * 1e3
        == Approx(block.forward_ms - model.bytesSeconds(tensor) * 1e3).epsilon(1e-9));
    // The backward's 8 products and its attention are the planner's; its memory traffic is the engine's own (the
    // zeroed and copied gradients the planner does not count).
    planner::TransformerConfig noBytes = o.shape;
    const double bytesFree = block.backwardMs()
        - model.bytesSeconds((24 + 13) * static_cast<double>(noBytes.microbatch) * noBytes.sequence * noBytes.hidden
              * noBytes.bytes_per_element)
            * 1e3;
    CHECK(priced(backward, model, false) * 1e3 == Approx(bytesFree).epsilon(1e-9));
    CHECK(priced(backward, model, true) > priced(backward, model, false));
}
