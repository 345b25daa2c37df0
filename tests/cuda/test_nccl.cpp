// SPDX-License-Identifier: MIT
// The NCCL transport (engine/cuda/nccl_transport.h) through its real code: on one GPU, a one-rank all-reduce
// (fp32 and bf16) and a send and receive to itself in one group, whose sent region may be overwritten at once; a
// one-stage run over an NCCL transport gives the CPU engine's losses. On two GPUs or more, a 2-stage 1F1B plan and
// a replicated stage (1 x 2, and 2 x 2 on four GPUs) train over NCCL to the one-stage CPU losses (fp32, 1e-4
// relative), and the replicas' bucketed all-reduce overlaps the backward of the last microbatch (its span starts
// before that backward's ends). Skipped where no GPU is visible, or NCCL (libnccl.so.2) is not found.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <unistd.h>

#include "engine/backend.h"
#include "engine/cuda/nccl_transport.h"
#include "engine/devices.h"
#include "engine/llmc.h"
#include "engine/local_run.h"
#include "tests/cuda/comparison.h"
#include "tests/engine/checkpoint_fixtures.h"
#include "tests/engine/engine_fixtures.h"
#include "tests/skip.h"

using namespace pw::engine;
using pw::planner::ActionKind;
using pw::test::Comparison;
using pw::test::comparison;
using pw::test::gpt2Plan;
using pw::test::setupOf;
using pw::test::StageCut;
namespace fs = std::filesystem;

namespace {

/// Why NCCL cannot be tried here, or empty.
std::string ncclMissing(int gpus)
{
    if (cudaDeviceCount() < gpus)
        return std::to_string(cudaDeviceCount()) + " CUDA device(s) visible, " + std::to_string(gpus) + " needed";
    const std::string version = probeCuda().nccl;
    if (version.rfind("not found", 0) == 0)
        return "NCCL " + version + " (put its lib folder in LD_LIBRARY_PATH)";
    return {};
}

std::shared_ptr<Backend> ncclGpu(int index, Precision precision)
{
    DeviceChoice choice;
    choice.cuda = index;
    choice.precision = precision;
    return std::shared_ptr<Backend>(makeBackend(choice));
}

std::vector<float> ramp(std::size_t n, float scale)
{
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = scale * static_cast<float>(static_cast<int>(i % 97) - 48);
    return v;
}

std::vector<float> hostOf(Backend& b, const Buffer& buffer)
{
    std::vector<float> out(buffer.count());
    b.download(out.data(), buffer.data(), buffer.dtype(), out.size());
    return out;
}

/// The CPU engine's per-step losses for `stages` (the oracle).
std::vector<double> cpuLosses(const Comparison& r, const std::vector<StageCut>& stages, const std::string& kind)
{
    const auto plan = gpt2Plan(r.shape, stages, kind, r.microbatches);
    const TrainingSetup setup = setupOf(r, plan);
    return runLocally(plan, setup, DataOrder(r.tokens, setup.microbatches, setup.shape.batch, setup.shape.seq), r.steps)
        .losses;
}

struct NcclRun
{
    std::vector<double> losses; ///< per step
    std::vector<pw::planner::Span> spans;
};

/// Every device of the plan on a GPU of its own (device d on cuda:d), one thread each, over NCCL transports.
/// With t > 1 each stage's devices are groups of t tensor-parallel ranks (sequence parallel with `sequence`).
NcclRun trainOverNccl(const Comparison& r, const std::vector<StageCut>& stages, const std::string& kind,
    std::size_t bucketBytes = std::size_t {25} << 20, int t = 1, bool sequence = false)
{
    auto plan = gpt2Plan(r.shape, stages, kind, r.microbatches);
    plan.tensor_parallel = t;
    plan.schedule.sequence_parallel = sequence;
    plan.validate();
    TrainingSetup setup = setupOf(r, plan);
    setup.bucket_bytes = bucketBytes;
    const DataOrder order(r.tokens, setup.microbatches, setup.shape.batch, setup.shape.seq);
    const RunSchedule program = runProgram(plan, r.steps);
    const int devices = program.period.num_devices;
    MemoryRendezvous store;
    std::mutex mutex;
    std::map<int, std::vector<float>> byStep;
    NcclRun out;
    std::string failure;
    std::atomic<bool> stop {false};
    std::vector<std::thread> threads;
    for (int d = 0; d < devices; ++d)
        threads.emplace_back([&, d] {
            try {
                auto backend = ncclGpu(d, Precision::Fp32);
                NcclOptions options;
                options.prefix = "test";
                options.timeout = std::chrono::seconds(60);
                auto transport = makeNcclTransport(d, devices, store, backend, options);
                ExecutorSink sink;
                sink.loss = [&](int microbatch, float loss) {
                    std::lock_guard lock(mutex);
                    byStep[microbatch / setup.microbatches].push_back(loss);
                };
                sink.span = [&](const pw::planner::Span& s) {
                    std::lock_guard lock(mutex);
                    out.spans.push_back(s);
                };
                DeviceExecutor executor(
                    plan, program.period, d, setup, order, *transport, std::move(sink), program.repeats, backend);
                executor.run(stop);
            } catch (const std::exception& e) {
                std::lock_guard lock(mutex);
                if (failure.empty())
                    failure = "device " + std::to_string(d) + ": " + e.what();
                stop = true;
            }
        });
    for (auto& t : threads)
        t.join();
    if (!failure.empty())
        FAIL(failure);
    for (const auto& [step, losses] : byStep) {
        double sum = 0;
        for (float l : losses)
            sum += l;
        out.losses.push_back(sum / static_cast<double>(losses.size()));
    }
    return out;
}

void ncclRequireClose(const std::vector<double>& got, const std::vector<double>& expected, double tolerance)
{
    REQUIRE(got.size() == expected.size());
    for (std::size_t k = 0; k < expected.size(); ++k) {
        INFO("step " << k << ": " << got[k] << " against " << expected[k]);
        REQUIRE(std::isfinite(got[k]));
        CHECK(got[k] == Approx(expected[k]).epsilon(tolerance));
    }
}

/// On each device holding a replicated stage: its AllReduce spans start before the backward before them ends.
void requireOverlap(const NcclRun& run)
{
    std::map<int, std::vector<pw::planner::Span>> byDevice;
    for (const auto& s : run.spans)
        byDevice[s.device].push_back(s);
    int overlapping = 0, allReduces = 0;
    for (auto& [device, spans] : byDevice) {
        std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) { return a.action < b.action; });
        for (std::size_t i = 0; i < spans.size(); ++i) {
            if (spans[i].kind != ActionKind::AllReduce)
                continue;
            ++allReduces;
            for (std::size_t j = i; j-- > 0;)
                if (spans[j].kind == ActionKind::Backward && spans[j].stage == spans[i].stage) {
                    INFO("device " << device << ": backward [" << spans[j].t0 << ", " << spans[j].t1
                                   << "], all-reduce [" << spans[i].t0 << ", " << spans[i].t1 << "]");
                    CHECK(spans[i].t0 < spans[j].t1);
                    overlapping += spans[i].t0 < spans[j].t1 ? 1 : 0;
                    break;
                }
        }
    }
    REQUIRE(allReduces > 0);
    CHECK(overlapping == allReduces);
}

} // namespace

TEST_CASE("NCCL one-rank all-reduce in fp32 and bf16 through the transport", "[cuda][nccl]")
{
    if (const auto why = ncclMissing(1); !why.empty())
        PW_SKIP(why);
    for (const Precision precision : {Precision::Fp32, Precision::Bf16Mixed}) {
        INFO(toString(precision));
        auto backend = ncclGpu(0, precision);
        MemoryRendezvous store;
        auto transport = makeNcclTransport(0, 1, store, backend);
        CHECK(transport->reaches(*backend));
        CHECK_FALSE(transport->reaches(cpuBackend()));
        // A group never made is an error, not a hang.
        CHECK_THROWS_AS(transport->send(0, 1, {}), TransportError);
        transport->makeGroups({{0}});
        const auto values = ramp(1000, 0.25f); // exact in bf16 too
        Buffer data(*backend, values.size(), backend->act());
        backend->upload(data.data(), data.dtype(), values.data(), values.size());
        transport->allReduceSum({0}, region(data)).wait();
        CHECK(hostOf(*backend, data) == values); // the sum over one rank
        CHECK_THROWS_WITH(transport->allReduceSum({0, 1}, region(data)), Catch::Contains("makeGroups did not make"));
        transport->flush();
    }
}

TEST_CASE("NCCL send and receive to self in one group - the sent region is free at once", "[cuda][nccl]")
{
    if (const auto why = ncclMissing(1); !why.empty())
        PW_SKIP(why);
    auto backend = ncclGpu(0, Precision::Fp32);
    MemoryRendezvous store;
    auto transport = makeNcclTransport(0, 1, store, backend);
    transport->makeGroups({});
    const auto values = ramp(100000, 1.5f);
    Buffer sent(*backend, values.size(), DType::F32), received(*backend, values.size(), DType::F32);
    backend->upload(sent.data(), DType::F32, values.data(), values.size());
    backend->zero(received.data(), received.bytes());
    const std::vector<Transfer> transfers {{Transfer::Direction::Send, 0, transferTag(false, 0, 0), region(sent)},
        {Transfer::Direction::Recv, 0, transferTag(false, 0, 0), region(received)}};
    auto handles = transport->exchange(transfers);
    REQUIRE(handles.size() == 2);
    backend->zero(sent.data(), sent.bytes()); // the send carries what the region held when it was posted
    for (auto& h : handles)
        h.wait();
    CHECK(hostOf(*backend, received) == values);
    transport->flush();
}

TEST_CASE("a 1-stage run over an NCCL transport gives the CPU engine's losses", "[cuda][nccl]")
{
    if (const auto why = ncclMissing(1); !why.empty())
        PW_SKIP(why);
    const Comparison r = comparison();
    const std::vector<StageCut> one {{0, 3, {0}}};
    ncclRequireClose(trainOverNccl(r, one, "1f1b").losses, cpuLosses(r, one, "1f1b"), 1e-4);
}

TEST_CASE("2-stage 1F1B over NCCL on two GPUs gives the one-stage losses", "[cuda][nccl]")
{
    if (const auto why = ncclMissing(2); !why.empty())
        PW_SKIP(why);
    const Comparison r = comparison();
    ncclRequireClose(
        trainOverNccl(r, {{0, 1, {0}}, {2, 3, {1}}}, "1f1b").losses, cpuLosses(r, {{0, 3, {0}}}, "1f1b"), 1e-4);
}

TEST_CASE("replicas over NCCL give the one-stage losses and all-reduce during the backward", "[cuda][nccl]")
{
    if (const auto why = ncclMissing(2); !why.empty())
        PW_SKIP(why);
    const Comparison r = comparison();
    const auto oneStage = cpuLosses(r, {{0, 3, {0}}}, "1f1b");
    // One bucket per layer: the head's gradients go out while the blocks' backward still runs.
    const auto replicas = trainOverNccl(r, {{0, 3, {0, 1}}}, "1f1b", 1);
    ncclRequireClose(replicas.losses, oneStage, 1e-4);
    requireOverlap(replicas);
    if (cudaDeviceCount() < 4) {
        WARN("the 2-stage x 2-replica plan needs 4 GPUs, " << cudaDeviceCount() << " visible: not run");
        return;
    }
    const auto grid = trainOverNccl(r, {{0, 1, {0, 1}}, {2, 3, {2, 3}}}, "1f1b", 1);
    ncclRequireClose(grid.losses, oneStage, 1e-4);
    requireOverlap(grid);
}

TEST_CASE("tensor parallelism over NCCL gives the one-stage losses", "[cuda][nccl][tensor-parallel]")
{
    if (const auto why = ncclMissing(2); !why.empty())
        PW_SKIP(why);
    const Comparison r = comparison();
    const auto oneStage = cpuLosses(r, {{0, 3, {0}}}, "1f1b");
    ncclRequireClose(trainOverNccl(r, {{0, 3, {0, 1}}}, "1f1b", std::size_t {25} << 20, 2).losses, oneStage, 1e-4);
    ncclRequireClose(
        trainOverNccl(r, {{0, 3, {0, 1}}}, "1f1b", std::size_t {25} << 20, 2, true).losses, oneStage, 1e-4);
    if (cudaDeviceCount() < 4) {
        WARN("t = 2 x p = 2 needs 4 GPUs, " << cudaDeviceCount() << " visible: not run");
        return;
    }
    ncclRequireClose(
        trainOverNccl(r, {{0, 1, {0, 1}}, {2, 3, {2, 3}}}, "zb-h1", std::size_t {25} << 20, 2, true).losses, oneStage,
        1e-4);
}
