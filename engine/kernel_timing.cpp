// SPDX-License-Identifier: MIT
#include "kernel_timing.h"

#include <cstdio>
#include <random>
#include <stdexcept>
#include <utility>

#include "model.h"
#include "ops.h"
#include "planner/gpu_cost_model.h"

namespace pw::engine {

namespace {

std::string text(const char* format, auto... values)
{
    char buffer[128];
    std::snprintf(buffer, sizeof buffer, format, values...);
    return buffer;
}

double d(auto value)
{
    return static_cast<double>(value);
}

} // namespace

double modelSeconds(const KernelCall& call, const planner::GpuCostModel& model)
{
    const KernelWork& work = call.work;
    if (work.host)
        return 0;
    double seconds = model.bytesSeconds(work.bytes);
    for (const auto& [m, n, k] : work.products)
        seconds += call.backward ? model.backwardGemmSeconds(m, n, k) : model.gemmSeconds(m, n, k);
    if (work.attention) {
        const auto& a = *work.attention;
        seconds += model.attentionSeconds(a.batch, a.heads, a.sequence, a.head_dim, a.backward);
    }
    return seconds;
}

TimingBackend::TimingBackend(Backend& inner)
    : m_inner(inner)
    , m_timer(inner.makeTimer())
{
}

TimingBackend::~TimingBackend() = default;

template <class F> void TimingBackend::timed(const char* kernel, std::string shape, KernelWork work, F&& call)
{
    const std::uint64_t ticket = m_timer->begin();
    call();
    m_timer->end(ticket);
    m_calls.push_back({ticket, KernelCall {kernel, std::move(shape), std::move(work), 0.0}});
}

std::vector<KernelCall> TimingBackend::take()
{
    std::vector<KernelCall> calls;
    calls.reserve(m_calls.size());
    std::size_t next = 0;
    m_timer->resolve(
        [&](std::uint64_t ticket, double t0, double t1) {
            // Tickets resolve in the order they began, which is the order of m_calls.
            while (next < m_calls.size() && m_calls[next].first != ticket)
                ++next;
            if (next == m_calls.size())
                return;
            KernelCall call = std::move(m_calls[next].second);
            call.seconds = t1 - t0;
            calls.push_back(std::move(call));
            ++next;
        },
        true);
    m_calls.clear();
    return calls;
}

void TimingBackend::zero(void* dst, std::size_t bytes)
{
    timed("zero", text("%zu B", bytes), {.bytes = d(bytes)}, [&] { m_inner.zero(dst, bytes); });
}

void TimingBackend::copy(void* dst, const void* src, std::size_t bytes)
{
    timed("copy", text("%zu B", bytes), {.bytes = 2 * d(bytes)}, [&] { m_inner.copy(dst, src, bytes); });
}

void TimingBackend::upload(void* dst, DType dtype, const float* host, std::size_t count)
{
    timed("upload", text("%zu x %s", count, toString(dtype)), {.bytes = d(count) * d(byteSize(dtype)), .host = true},
        [&] { m_inner.upload(dst, dtype, host, count); });
}

void TimingBackend::uploadTokens(std::int32_t* dst, const std::int32_t* host, std::size_t count)
{
    timed("upload tokens", text("%zu", count), {.bytes = 4 * d(count), .host = true},
        [&] { m_inner.uploadTokens(dst, host, count); });
}

void TimingBackend::encoderForward(
    void* out, const std::int32_t* tokens, const void* wte, const void* wpe, int B, int T, int C)
{
    // Reads a token row and a position row, writes the sum: 3 [B T, C] tensors.
    timed("encoder forward", text("%d x %d x %d", B, T, C), {.bytes = 3 * d(B) * T * C * element()},
        [&] { m_inner.encoderForward(out, tokens, wte, wpe, B, T, C); });
}

void TimingBackend::encoderBackward(
    void* dwte, void* dwpe, const void* dout, const std::int32_t* tokens, int B, int T, int C)
{
    // Reads dout, reads and writes the token rows' gradients; the position rows' are T x C.
    timed("encoder backward", text("%d x %d x %d", B, T, C), {.bytes = 3 * d(B) * T * C * element()},
        [&] { m_inner.encoderBackward(dwte, dwpe, dout, tokens, B, T, C); });
}

void TimingBackend::layernormForward(
    void* out, float* mean, float* rstd, const void* inp, const void* weight, const void* bias, int BT, int C)
{
    timed("layernorm forward", text("%d x %d", BT, C), {.bytes = 2 * d(BT) * C * element()},
        [&] { m_inner.layernormForward(out, mean, rstd, inp, weight, bias, BT, C); });
}

void TimingBackend::layernormBackward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
    const void* weight, const float* mean, const float* rstd, int BT, int C)
{
    // As the planner counts it: dX reads x and dY and writes dX (3), dgamma and dbeta read x and dY (2).
    const double units = (dinp ? 3 : 0) + (dweight || dbias ? 2 : 0);
    timed("layernorm backward", text("%d x %d%s%s", BT, C, dinp ? ", dx" : "", dweight || dbias ? ", dweight" : ""),
        {.bytes = units * d(BT) * C * element()},
        [&] { m_inner.layernormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, BT, C); });
}

void TimingBackend::matmulForward(
    void* out, const void* inp, const void* weight, const void* bias, int BT, int C, int OC, void* gelu_out)
{
    KernelWork work;
    work.products.push_back({d(BT), d(OC), d(C)});
    if (gelu_out)
        work.bytes = 2 * d(BT) * OC * element(); // GELU: its input read, its output written (the planner's count)
    timed("matmul forward", text("%d x %d -> %d%s%s", BT, C, OC, bias ? ", bias" : "", gelu_out ? ", GELU" : ""),
        std::move(work), [&] { m_inner.matmulForward(out, inp, weight, bias, BT, C, OC, gelu_out); });
}

void TimingBackend::matmulBackward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
    const void* weight, int BT, int C, int OC)
{
    KernelWork work;
    if (dinp)
        work.products.push_back({d(BT), d(C), d(OC)}); // dX = dY W^T
    if (dweight)
        work.products.push_back({d(C), d(OC), d(BT)}); // dW = X^T dY
    if (dbias)
        work.bytes = d(BT) * OC * element(); // the bias gradient reads dY
    timed("matmul backward",
        text("%d x %d <- %d%s%s%s", BT, C, OC, dinp ? ", dx" : "", dweight ? ", dweight" : "", dbias ? ", dbias" : ""),
        std::move(work), [&] { m_inner.matmulBackward(dinp, dweight, dbias, dout, inp, weight, BT, C, OC); });
}

void TimingBackend::matmulBackwardGelu(
    void* dinp, const void* dout, const void* weight, const void* pre_gelu, int BT, int C, int OC)
{
    // The input gradient's product and GELU's backward (the planner's: its input and dY read, dX written, 3 tensors).
    KernelWork work;
    work.products.push_back({d(BT), d(C), d(OC)});
    work.bytes = 3 * d(BT) * C * element();
    timed("matmul backward GELU", text("%d x %d <- %d, dx", BT, C, OC), std::move(work),
        [&] { m_inner.matmulBackwardGelu(dinp, dout, weight, pre_gelu, BT, C, OC); });
}

void TimingBackend::attentionForward(void* out, float* stash, const void* qkv, const AttentionShape& a)
{
    timed("attention forward", text("%d x %d x %d, %d heads, %d kv", a.batch, a.seq, a.channels(), a.heads, a.kv_heads),
        {.attention = KernelWork::Attention {d(a.batch), d(a.heads), d(a.seq), d(a.head_size), false}},
        [&] { m_inner.attentionForward(out, stash, qkv, a); });
}

void TimingBackend::attentionBackward(
    void* dqkv, const void* dout, const void* qkv, const void* out, const float* stash, const AttentionShape& a)
{
    timed("attention backward",
        text("%d x %d x %d, %d heads, %d kv", a.batch, a.seq, a.channels(), a.heads, a.kv_heads),
        {.attention = KernelWork::Attention {d(a.batch), d(a.heads), d(a.seq), d(a.head_size), true}},
        [&] { m_inner.attentionBackward(dqkv, dout, qkv, out, stash, a); });
}

void TimingBackend::rmsnormForward(
    void* out, float* rstd, const void* inp, const void* weight, int BT, int C, float eps)
{
    timed("rmsnorm forward", text("%d x %d", BT, C), {.bytes = 2 * d(BT) * C * element()},
        [&] { m_inner.rmsnormForward(out, rstd, inp, weight, BT, C, eps); });
}

void TimingBackend::residualNormForward(void* sum, void* out, float* mean, float* rstd, const void* a, const void* b,
    const void* weight, const void* bias, int BT, int C, float eps)
{
    // Reads a and b, writes the sum and the norm's output.
    timed(mean ? "residual + layernorm forward" : "residual + rmsnorm forward", text("%d x %d", BT, C),
        {.bytes = 4 * d(BT) * C * element()},
        [&] { m_inner.residualNormForward(sum, out, mean, rstd, a, b, weight, bias, BT, C, eps); });
}

void TimingBackend::normBackwardResidual(void* dinp, const void* dresidual, const void* dout, const void* inp,
    const void* weight, const float* mean, const float* rstd, int BT, int C)
{
    // Reads dY, x and the residual's gradient, writes dX.
    timed(mean ? "layernorm backward + residual" : "rmsnorm backward + residual", text("%d x %d", BT, C),
        {.bytes = 4 * d(BT) * C * element()},
        [&] { m_inner.normBackwardResidual(dinp, dresidual, dout, inp, weight, mean, rstd, BT, C); });
}

void TimingBackend::rmsnormBackward(
    void* dinp, void* dweight, const void* dout, const void* inp, const void* weight, const float* rstd, int BT, int C)
{
    const double units = (dinp ? 3 : 0) + (dweight ? 2 : 0); // as the layer norm's
    timed("rmsnorm backward", text("%d x %d%s%s", BT, C, dinp ? ", dx" : "", dweight ? ", dweight" : ""),
        {.bytes = units * d(BT) * C * element()},
        [&] { m_inner.rmsnormBackward(dinp, dweight, dout, inp, weight, rstd, BT, C); });
}

void TimingBackend::rotary(void* x, const float* table, int B, int T, int heads, int hs, int stride, bool inverse)
{
    timed(inverse ? "rotary backward" : "rotary forward", text("%d x %d, %d heads of %d", B, T, heads, hs),
        {.bytes = 2 * d(B) * T * heads * hs * element()},
        [&] { m_inner.rotary(x, table, B, T, heads, hs, stride, inverse); });
}

void TimingBackend::swigluForward(void* out, const void* inp, int BT, int F)
{
    timed("swiglu forward", text("%d x %d", BT, F), {.bytes = 3 * d(BT) * F * element()},
        [&] { m_inner.swigluForward(out, inp, BT, F); });
}

void TimingBackend::swigluBackward(void* dinp, const void* inp, const void* dout, int BT, int F)
{
    timed("swiglu backward", text("%d x %d", BT, F), {.bytes = 5 * d(BT) * F * element()},
        [&] { m_inner.swigluBackward(dinp, inp, dout, BT, F); });
}

void TimingBackend::geluForward(void* out, const void* inp, std::size_t n)
{
    timed("gelu forward", text("%zu", n), {.bytes = 2 * d(n) * element()}, [&] { m_inner.geluForward(out, inp, n); });
}

void TimingBackend::geluBackward(void* dinp, const void* inp, const void* dout, std::size_t n)
{
    timed("gelu backward", text("%zu", n), {.bytes = 3 * d(n) * element()},
        [&] { m_inner.geluBackward(dinp, inp, dout, n); });
}

void TimingBackend::residualForward(void* out, const void* a, const void* b, std::size_t n)
{
    timed("residual forward", text("%zu", n), {.bytes = 3 * d(n) * element()},
        [&] { m_inner.residualForward(out, a, b, n); });
}

void TimingBackend::sum(void* out, std::span<const void* const> parts, std::size_t n)
{
    timed("sum", text("%zu x %zu", parts.size(), n),
        {.bytes = static_cast<double>(parts.size() + 1) * d(n) * element()}, [&] { m_inner.sum(out, parts, n); });
}

void TimingBackend::classifier(
    float* losses, void* logits, const std::int32_t* targets, int BT, int V, int stride, float dscale)
{
    // Reads the logits and writes their gradient in place (the planner's cross-entropy: read, then read and write).
    timed("classifier", text("%d x %d (of %d)", BT, V, stride), {.bytes = 2 * d(BT) * stride * element()},
        [&] { m_inner.classifier(losses, logits, targets, BT, V, stride, dscale); });
}

void TimingBackend::classifierStats(
    float* stats, const void* logits, const std::int32_t* targets, int BT, int V, int stride)
{
    timed("classifier stats", text("%d x %d (of %d)", BT, V, stride), {.bytes = d(BT) * stride * element()},
        [&] { m_inner.classifierStats(stats, logits, targets, BT, V, stride); });
}

void TimingBackend::classifierFinish(float* losses, void* logits, const float* stats, int ranks,
    const std::int32_t* targets, int BT, int V, int stride, float dscale)
{
    timed("classifier finish", text("%d x %d (of %d), %d ranks", BT, V, stride, ranks),
        {.bytes = 2 * d(BT) * stride * element()},
        [&] { m_inner.classifierFinish(losses, logits, stats, ranks, targets, BT, V, stride, dscale); });
}

void TimingBackend::mean(float* out, const float* x, std::size_t n)
{
    timed("mean", text("%zu", n), {.bytes = 4 * d(n)}, [&] { m_inner.mean(out, x, n); });
}

void TimingBackend::scale(void* x, float factor, std::size_t n)
{
    timed("scale", text("%zu", n), {.bytes = 2 * d(n) * element()}, [&] { m_inner.scale(x, factor, n); });
}

void TimingBackend::sumSquares(float* out, const void* x, std::size_t n)
{
    timed("sum of squares", text("%zu", n), {.bytes = d(n) * element()}, [&] { m_inner.sumSquares(out, x, n); });
}

void TimingBackend::addDifference(float* sum, const void* a, const void* b, std::size_t n)
{
    timed("add difference", text("%zu", n), {.bytes = d(n) * (8 + 2 * element())},
        [&] { m_inner.addDifference(sum, a, b, n); });
}

void TimingBackend::addUpdate(void* params, float* master, const float* update, std::size_t n)
{
    timed("add update", text("%zu", n), {.bytes = d(n) * (4 + 2 * element() + (master ? 8 : 0))},
        [&] { m_inner.addUpdate(params, master, update, n); });
}

void TimingBackend::adamw(void* params, float* master, const void* grads, float* m, float* v, std::size_t n, float lr,
    float beta1, float beta2, float eps, float decay_factor, float c1, float c2)
{
    // Reads the gradient, reads and writes both moments and the weights (and the master copy).
    const double perElement = element() + 16 + (master ? 8 + element() : 2 * element());
    timed("adamw", text("%zu", n), {.bytes = d(n) * perElement},
        [&] { m_inner.adamw(params, master, grads, m, v, n, lr, beta1, beta2, eps, decay_factor, c1, c2); });
}

void TimingBackend::adamwTensors(void* params, float* master, const void* grads, float* m, float* v,
    std::span<const AdamWTensor> tensors, float lr, float beta1, float beta2, float eps, float decay_factor, float c1,
    float c2)
{
    std::size_t n = 0;
    for (const auto& t : tensors)
        n += t.size;
    const double perElement = element() + 16 + (master ? 8 + element() : 2 * element());
    timed("adamw", text("%zu tensors, %zu", tensors.size(), n), {.bytes = d(n) * perElement}, [&] {
        m_inner.adamwTensors(params, master, grads, m, v, tensors, lr, beta1, beta2, eps, decay_factor, c1, c2);
    });
}

std::vector<KernelCall> measureLayerKernels(const ProfileOptions& options, int layer)
{
    options.validate();
    ModelConfig config = ModelConfig::fromTransformer(options.shape);
    config.validate();
    if (layer < 0 || layer >= config.layerCount())
        throw std::invalid_argument("layer " + std::to_string(layer) + " is not one of the model's 0 ... "
            + std::to_string(config.layerCount() - 1));
    const BatchShape shape {options.shape.microbatch, options.shape.sequence};
    const int previousThreads = ops::threads();
    ops::setThreads(options.threads);
    const std::unique_ptr<Backend> device = makeBackend(options.device);
    TimingBackend backend(*device);

    StageModel model(config, shape, layer, layer, backend);
    model.initialise(options.seed);
    const std::size_t tokens = static_cast<std::size_t>(shape.batch) * shape.seq;
    std::vector<std::int32_t> inputs(tokens), targets(tokens);
    std::mt19937_64 rng(options.seed);
    std::uniform_int_distribution<std::int32_t> token(0, config.vocab - 1);
    for (std::size_t i = 0; i < tokens; ++i) {
        inputs[i] = token(rng);
        targets[i] = token(rng);
    }
    // The block's input and output gradient: values of an activation's size (GPT-2's residual stream is O(1)).
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> values(model.activationCount());
    for (float& v : values)
        v = normal(rng);
    Buffer x, dout(backend, values.size(), backend.act()), loss(backend, 1, DType::F32);
    backend.upload(dout.data(), dout.dtype(), values.data(), values.size());
    StageStash stash;

    std::vector<std::vector<KernelCall>> passes;
    for (int pass = 0; pass < options.warmup + options.repeats; ++pass) {
        if (!model.hasEmbedding()) {
            x.ensure(backend, values.size(), backend.act());
            backend.upload(x.data(), x.dtype(), values.data(), values.size());
        }
        backend.take(); // the input's upload is not the layer's
        model.forward(
            stash, model.params().data(), inputs, model.hasEmbedding() ? nullptr : &x, targets, 1.0f, loss.as<float>());
        std::vector<KernelCall> calls = backend.take();
        model.backward(stash, model.params().data(), model.grads().data(), model.hasHead() ? nullptr : &dout);
        for (KernelCall& c : backend.take()) {
            c.backward = true;
            calls.push_back(std::move(c));
        }
        model.zeroGrads();
        backend.take();
        if (pass >= options.warmup)
            passes.push_back(std::move(calls));
    }
    ops::setThreads(previousThreads);

    std::vector<KernelCall> result = passes.front();
    for (std::size_t i = 0; i < result.size(); ++i) {
        std::vector<double> times;
        for (const auto& p : passes) {
            if (p.size() != result.size() || p[i].kernel != result[i].kernel)
                throw std::logic_error("measureLayerKernels: the passes made different calls");
            times.push_back(p[i].seconds);
        }
        result[i].seconds = median(std::move(times));
    }
    return result;
}

} // namespace pw::engine
