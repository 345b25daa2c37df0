// SPDX-License-Identifier: MIT
// The device fabric (stages sharing one GPU, device memory only) checked on CPU backends, whose stream is their
// thread: transfers match by peer and tag in posting order, sizes are checked, all-reduces give every member the
// same fixed-order sum, staging buffers come back to their arena (nothing allocated after the first round), an abort
// wakes a waiter, the linked transport routes fabric peers to the fabric and the rest elsewhere; and whole runs over
// the fabric train to the host-linked runs' losses and weights (to the last bits the CPU kernels' reductions leave).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <thread>

#include "engine/device_fabric.h"
#include "engine/local_run.h"
#include "engine/ops.h"
#include "tests/engine/engine_fixtures.h"

using namespace pw::engine;
using pw::test::gpt2Plan;
using pw::test::tinyGpt2;

namespace {

std::vector<std::shared_ptr<Backend>> cpuBackends(int n)
{
    std::vector<std::shared_ptr<Backend>> out;
    for (int i = 0; i < n; ++i)
        out.push_back(makeCpuBackend());
    return out;
}

Buffer filled(Backend& b, std::vector<float> values)
{
    Buffer buffer(b, values.size(), DType::F32);
    std::copy(values.begin(), values.end(), buffer.host<float>().begin());
    return buffer;
}

std::vector<float> contents(const Buffer& b)
{
    const auto h = b.host<float>();
    return {h.begin(), h.end()};
}

} // namespace

TEST_CASE("the CPU sum adds its parts in their order", "[engine][fabric]")
{
    const std::vector<float> a {1e8f, 1.0f, -3.0f}, b {1.0f, 2.0f, 0.5f}, c {-1e8f, 4.0f, 0.25f};
    const float* parts[] = {a.data(), b.data(), c.data()};
    std::vector<float> out(3);
    ops::sumParts(out.data(), parts, 3);
    for (std::size_t i = 0; i < 3; ++i)
        CHECK(out[i] == (a[i] + b[i]) + c[i]); // fp32 left to right: 1e8 + 1 rounds to 1e8, so out[0] is 0
    CHECK(out[0] == 0.0f);
    ops::sumParts(out.data(), parts, 3);
    std::vector<float> inPlace = a;
    const float* aliased[] = {inPlace.data(), b.data(), c.data()};
    ops::sumParts(inPlace.data(), aliased, 3);
    CHECK(inPlace == out);
}

TEST_CASE("device fabric transfers match by peer and tag in posting order", "[engine][fabric]")
{
    auto backends = cpuBackends(3);
    DeviceFabric fabric({backends[0], nullptr, backends[1], backends[2]}); // device 1 is not on it
    CHECK(fabric.devices() == std::vector<int> {0, 2, 3});
    Transport& zero = fabric.endpoint(0);
    Transport& two = fabric.endpoint(2);
    CHECK(zero.completion() == Transport::Completion::Stream);
    CHECK(zero.reaches(*backends[0]));
    CHECK_FALSE(zero.reaches(*backends[1]));
    CHECK_THROWS_AS(fabric.endpoint(1), std::out_of_range);

    Buffer a = filled(*backends[0], {1, 2, 3}), b = filled(*backends[0], {4, 5, 6});
    zero.send(2, 7, region(a));
    zero.send(2, 7, region(b));
    a = filled(*backends[0], {9, 9, 9}); // the sender's region is free once send() returns
    zero.send(2, 8, region(a));
    Buffer first(*backends[1], 3, DType::F32), second(*backends[1], 3, DType::F32), other(*backends[1], 3, DType::F32);
    two.recv(0, 8, region(other)).wait();
    two.recv(0, 7, region(first)).wait();
    two.recv(0, 7, region(second)).wait();
    CHECK(contents(first) == std::vector<float> {1, 2, 3});
    CHECK(contents(second) == std::vector<float> {4, 5, 6});
    CHECK(contents(other) == std::vector<float> {9, 9, 9});

    SECTION("a receive of another size names both")
    {
        zero.send(2, 1, region(a));
        Buffer small(*backends[1], 2, DType::F32);
        CHECK_THROWS_WITH(two.recv(0, 1, region(small)).wait(),
            Catch::Contains("expected 2 fp32 elements from device 0, got 3 fp32 elements"));
    }
    SECTION("a peer off the fabric is refused")
    {
        CHECK_THROWS_AS(zero.send(1, 1, region(a)), TransportError);
        CHECK_THROWS_AS(zero.send(0, 1, region(a)), TransportError);
    }
}

TEST_CASE("device fabric all-reduces give every member the same fixed-order sum", "[engine][fabric]")
{
    auto backends = cpuBackends(3);
    DeviceFabric fabric(backends);
    const std::vector<int> group {0, 1, 2};
    const std::vector<std::vector<float>> values {{1e8f, 1, 0.1f}, {1, 2, 0.2f}, {-1e8f, 3, 0.3f}};
    std::vector<std::vector<float>> results(3);
    std::vector<std::thread> threads;
    for (int d = 0; d < 3; ++d)
        threads.emplace_back([&, d] {
            Transport& t = fabric.endpoint(d);
            t.makeGroups({group, {0, 1}});
            Buffer x = filled(*backends[static_cast<std::size_t>(d)], values[static_cast<std::size_t>(d)]);
            for (int round = 0; round < 3; ++round) { // later rounds sum the previous round's sums
                Handle h = t.allReduceSum(group, region(x));
                h.wait();
                if (round == 0)
                    results[static_cast<std::size_t>(d)] = contents(x);
            }
        });
    for (auto& t : threads)
        t.join();
    std::vector<float> expected(3);
    for (std::size_t i = 0; i < 3; ++i)
        expected[i] = (values[0][i] + values[1][i]) + values[2][i];
    for (const auto& r : results)
        CHECK(r == expected); // the same bits on every member, in member order (1e8 + 1 - 1e8 = 0)

    SECTION("a group not made, and a group with a device off the fabric, are refused")
    {
        Transport& t = fabric.endpoint(0);
        Buffer x = filled(*backends[0], {1});
        CHECK_THROWS_WITH(t.allReduceSum({0, 2}, region(x)), Catch::Contains("did not make"));
        DeviceFabric pair({backends[0], backends[1]});
        CHECK_THROWS_WITH(pair.endpoint(0).makeGroups({{0, 1, 2}}), Catch::Contains("not on its GPU's fabric"));
    }
}

TEST_CASE("device fabric staging buffers return to their arena: what a device reserves does not grow with the rounds",
    "[engine][fabric]")
{
    auto backends = cpuBackends(2);
    DeviceFabric fabric(backends);
    std::vector<std::size_t> reserved(2);
    std::vector<std::thread> threads;
    constexpr std::size_t kCount = 1000, kBytes = kCount * sizeof(float);
    for (int d = 0; d < 2; ++d)
        threads.emplace_back([&, d] {
            Transport& t = fabric.endpoint(d);
            Backend& b = *backends[static_cast<std::size_t>(d)];
            t.makeGroups({{0, 1}});
            Buffer x(b, kCount, DType::F32), y(b, kCount, DType::F32);
            for (int round = 0; round < 200; ++round) {
                if (d == 0) {
                    t.send(1, static_cast<std::uint64_t>(round), region(x));
                    t.recv(1, static_cast<std::uint64_t>(round), region(y)).wait();
                } else {
                    t.recv(0, static_cast<std::uint64_t>(round), region(y)).wait();
                    t.send(0, static_cast<std::uint64_t>(round), region(x));
                }
                t.allReduceSum({0, 1}, region(x)).wait();
            }
            t.flush();
            reserved[static_cast<std::size_t>(d)] = b.memory().reserved;
        });
    for (auto& t : threads)
        t.join();
    // x and y, and the staging copies in flight at once (a send not yet received, an all-reduce's part): a few,
    // whatever the number of rounds (400 transfers and 200 all-reduces would be 600 buffers without the returns).
    for (std::size_t r : reserved)
        CHECK(r <= 6 * kBytes);
}

TEST_CASE("device fabric abort wakes a waiting receiver", "[engine][fabric]")
{
    auto backends = cpuBackends(2);
    DeviceFabric fabric(backends);
    Buffer x(*backends[1], 4, DType::F32);
    std::thread stopper([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        fabric.abort("device 0 failed");
    });
    CHECK_THROWS_WITH(fabric.endpoint(1).recv(0, 1, region(x)).wait(), Catch::Contains("device 0 failed"));
    stopper.join();
}

TEST_CASE("linked transports: fabric peers over the fabric, the others over the remote transport", "[engine][fabric]")
{
    // Devices 0 and 1 share a "GPU"; device 2 is elsewhere, reached through a host transport.
    auto backends = cpuBackends(3);
    DeviceFabric fabric({backends[0], backends[1], nullptr});
    LocalFabric host(3);
    std::vector<std::unique_ptr<Transport>> staged, linked;
    for (int d = 0; d < 2; ++d) {
        staged.push_back(throughHost(host.endpoint(d), *backends[static_cast<std::size_t>(d)]));
        linked.push_back(linkTransports(fabric.endpoint(d), {0, 1}, *staged.back()));
    }
    CHECK(linked[0]->completion() == Transport::Completion::Stream);
    CHECK(linked[0]->reaches(*backends[0]));
    const std::vector<std::vector<int>> groups {{0, 1}, {0, 1, 2}};
    std::vector<std::vector<float>> got(3);
    std::vector<std::thread> threads;
    for (int d = 0; d < 3; ++d)
        threads.emplace_back([&, d] {
            Backend& b = *backends[static_cast<std::size_t>(d)];
            Transport& t = d < 2 ? *linked[static_cast<std::size_t>(d)] : host.endpoint(2);
            t.makeGroups(groups);
            Buffer x = filled(b, {static_cast<float>(d + 1), 10.0f * static_cast<float>(d + 1)});
            if (d == 0) {
                Buffer to1 = filled(b, {5, 6}), to2 = filled(b, {7, 8});
                const Transfer sends[]
                    = {{Transfer::Direction::Send, 1, 3, region(to1)}, {Transfer::Direction::Send, 2, 3, region(to2)}};
                t.exchange(sends);
            } else {
                Buffer in(b, 2, DType::F32);
                t.recv(0, 3, region(in)).wait();
                got[static_cast<std::size_t>(d)] = contents(in);
            }
            if (d < 2)
                t.allReduceSum({0, 1}, region(x)).wait(); // 1 + 2, 10 + 20 on the fabric
            t.allReduceSum({0, 1, 2}, region(x)).wait(); // (3 + 3 + 3), (30 + 30 + 30) over the host
            if (d == 0)
                got[0] = contents(x);
            t.flush();
        });
    for (auto& t : threads)
        t.join();
    CHECK(got[1] == std::vector<float> {5, 6});
    CHECK(got[2] == std::vector<float> {7, 8});
    CHECK(got[0] == std::vector<float> {9, 90});
}

TEST_CASE("runs over the device fabric train to the host-linked runs' losses and weights", "[engine][fabric]")
{
    const auto shape = tinyGpt2(3); // embedding, 3 blocks, head (tied: the first and last stages all-reduce wte)
    struct Case
    {
        const char* name;
        pw::planner::Plan plan;
    };
    const std::vector<Case> cases {
        {"2 stages 1F1B", gpt2Plan(shape, {{0, 1, {0}}, {2, 4, {1}}}, "1f1b")},
        {"4 stages 1F1B", gpt2Plan(shape, {{0, 1, {0}}, {2, 2, {1}}, {3, 3, {2}}, {4, 4, {3}}}, "1f1b")},
        {"4 stages zb-h1", gpt2Plan(shape, {{0, 1, {0}}, {2, 2, {1}}, {3, 3, {2}}, {4, 4, {3}}}, "zb-h1")},
        {"a replicated stage (all-reduce in buckets)", gpt2Plan(shape, {{0, 2, {0, 1}}, {3, 4, {2}}}, "1f1b")},
        {"interleaved: 2 devices, 2 chunks",
            gpt2Plan(shape, {{0, 1, {0}}, {2, 2, {1}}, {3, 3, {0}}, {4, 4, {1}}}, "interleaved", 4, 2)},
    };
    for (const auto& c : cases) {
        SECTION(c.name)
        {
            TrainingSetup setup = trainingSetup(c.plan);
            setup.adam.lr = 1e-2;
            setup.bucket_bytes = 4096; // several buckets per stage
            DataSpec spec;
            spec.synthetic_tokens = 20000;
            const DataOrder data(
                loadTokens(spec, setup.model.vocab), setup.microbatches, setup.shape.batch, setup.shape.seq);
            const auto host = runLocally(c.plan, setup, data, 4, {}, LocalLinks::Host);
            const auto device = runLocally(c.plan, setup, data, 4, {}, LocalLinks::Device);
            // Not bit for bit: the CPU kernels' OpenMP reductions (the gradient norm's) combine their threads' partial
            // sums in the order the threads finish, so two runs over the same links differ in the last bits too.
            REQUIRE(device.losses.size() == host.losses.size());
            for (std::size_t i = 0; i < host.losses.size(); ++i)
                CHECK(device.losses[i] == Approx(host.losses[i]).epsilon(1e-6));
            // The weights norm-wise, against 10x the noise of two runs over the same links: two host-linked runs
            // differ by 0.5-1.3e-6 norm-wise after these 4 steps, two fabric runs by 0.6-1.0e-6, a host-linked and a
            // fabric run by 0.8-1.1e-6 (measured here; one element's by up to 1.3e-5: AdamW divides by the root of
            // a tiny second moment).
            REQUIRE(device.final_parameters.size() == host.final_parameters.size());
            double diff = 0, norm = 0;
            for (std::size_t i = 0; i < host.final_parameters.size(); ++i) {
                const double d = static_cast<double>(device.final_parameters[i]) - host.final_parameters[i];
                diff += d * d;
                norm += static_cast<double>(host.final_parameters[i]) * host.final_parameters[i];
            }
            CHECK(std::sqrt(diff / norm) < 1e-5);
            CHECK(host.losses.back() < host.losses.front());
        }
    }
}

TEST_CASE(
    "the in-process transport carries any element type byte for byte, and all-reduces fp32 only", "[engine][fabric]")
{
    LocalFabric fabric(2);
    fabric.endpoint(0).makeGroups({{0, 1}});
    const std::vector<std::uint16_t> bits {0x3f80, 0xbf00, 0x7f7f, 0x0001};
    fabric.endpoint(0).send(1, 9, {const_cast<std::uint16_t*>(bits.data()), DType::BF16, bits.size()});
    std::vector<std::uint16_t> got(bits.size());
    fabric.endpoint(1).recv(0, 9, {got.data(), DType::BF16, got.size()}).wait();
    CHECK(got == bits);
    fabric.endpoint(0).send(1, 10, {const_cast<std::uint16_t*>(bits.data()), DType::BF16, bits.size()});
    std::vector<float> wrong(bits.size());
    CHECK_THROWS_WITH(fabric.endpoint(1).recv(0, 10, {wrong.data(), DType::F32, wrong.size()}).wait(),
        Catch::Contains("expected 4 fp32 elements from device 0, got 4 bf16 elements"));
    CHECK_THROWS_WITH(fabric.endpoint(0).allReduceSum({0, 1}, {got.data(), DType::BF16, got.size()}),
        Catch::Contains("all-reduces fp32"));
}
