// SPDX-License-Identifier: MIT
// Megatron's search with the zero-bubble schedules (issue 23): the estimate's bubble and stashes per kind against the
// simulator, the demo GPT picking a zero-bubble kind that the simulator confirms, a fitting kind under tight memory
// with the note saying why, and the request fixing the kind or turning the zero-bubble kinds off.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "planner/device_presets.h"
#include "planner/io/json_file.h"
#include "planner/partition/megatron.h"
#include "planner/partition/partitioner.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"
#include "tests/planner/fixtures.h"

using namespace pw::planner;
using nlohmann::json;

namespace {

/// `layers` equal layers of F = f, I = b, W = w ms on p devices with free optimizer steps and links of `latency`
/// (else free); each stashes 1 MB and holds 1 MB of weights.
PartitionRequest zeroBubbleSearchChain(
    int layers, int p, double f, double b, double w, double memory = 80e9, double latency = 0)
{
    PartitionRequest request;
    auto model = pw::test::uniformChain(layers, {f, b + w, 1e6, 1e6, {}});
    for (auto& layer : model.layers) {
        layer.backward_input_ms = b;
        layer.backward_weight_ms = w;
    }
    request.model = model;
    request.cluster = pw::test::uniformCluster(1, p, {memory, 100, 1e15, latency, 0, 0});
    return request;
}

std::string note(const PartitionResult& r)
{
    for (const auto& d : r.diagnostics)
        if (d.code == "megatron")
            return d.message;
    return {};
}

PartitionResult search(PartitionRequest request, json params, int microbatches = 8)
{
    request.options.schedule.microbatches = microbatches;
    request.options.params = std::move(params);
    return findPartitioner("megatron")->partition(request, {}, {});
}

megatron::Config zeroBubbleSearchChosen(const Plan& plan)
{
    const auto& j = plan.algorithm_options.at("chosen");
    const std::string kind = j.at("schedule");
    return {j.at("p").get<int>(), j.at("t").get<int>(), j.at("d").get<int>(), j.at("b").get<int>(),
        j.at("v").get<int>(), recomputeNamed(j.at("recompute").get<std::string>(), "recompute"), j.at("m").get<int>(),
        kind == "1f1b" || kind == "interleaved" ? std::string() : kind};
}

double zeroBubbleSearchPeak(const SimulationResult& sim)
{
    double most = 0;
    for (const auto& d : sim.devices)
        most = std::max(most, d.peak_memory_bytes);
    return most;
}

} // namespace

TEST_CASE("the estimate's zero-bubble bubbles are the simulator's", "[zero-bubble][megatron]")
{
    // docs/algorithms/zero-bubble.md's closed forms, through configPlan and estimate: exact for zb-h1 (T_W <= T_F)
    // and zb-h2 (m >= 2p - 1); for zbv the same form as zb-h2, which the simulator meets within 10 % of the batch.
    struct Times
    {
        double f, b, w;
    };
    for (const Times t : {Times {1, 1, 1}, Times {1, 1.5, 0.5}, Times {2, 1.5, 1}, Times {1, 1, 0.6}})
        for (int p : {2, 4})
            for (int m : {2 * p - 1, 3 * p})
                for (const std::string kind : {"zb-h1", "zb-h2", "zbv"}) {
                    INFO(kind << " p = " << p << " m = " << m << " T = " << t.f << ", " << t.b << ", " << t.w);
                    const auto request = zeroBubbleSearchChain(4 * p, p, t.f, t.b, t.w);
                    const megatron::Config config {p, 1, 1, 1, kind == "zbv" ? 2 : 1, Recompute::None, m, kind};
                    const Plan plan = megatron::configPlan(request, config);
                    REQUIRE(plan.schedule.kind == kind);
                    const auto schedule = generateSchedule(plan);
                    REQUIRE(validate(schedule, plan).ok);
                    const auto sim = simulate(plan, schedule);
                    const auto est = megatron::estimate(plan, config);
                    const double work = m * 4 * (t.f + t.b + t.w) * 1e-3;
                    CHECK(est.stage_time_s * m == Approx(work));
                    if (kind == "zbv")
                        CHECK(est.pipeline_s == Approx(sim.iteration_time_s).epsilon(0.1));
                    else
                        CHECK(est.pipeline_s == Approx(sim.iteration_time_s).epsilon(1e-6)); // 1 ns transfers
                    // Stashes: zb-h1 holds p on every stage, zb-h2 2p - 1, zbv 2p chunk stashes of half a stage.
                    const double simPeak = zeroBubbleSearchPeak(sim);
                    if (kind == "zbv")
                        CHECK(est.peak_memory_bytes >= simPeak);
                    else
                        CHECK(est.peak_memory_bytes == Approx(simPeak).epsilon(1e-9));
                }
}

TEST_CASE("megatron picks a zero-bubble schedule for the demo GPT on 4 H100s and the simulator agrees",
    "[zero-bubble][megatron]")
{
    PartitionRequest request;
    request.model = loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json");
    request.cluster = loadCluster(std::string(PW_DEMO_DIR) + "/dgx-h100.json");
    request.options.devices = 4;
    // A pipeline of 4 (the demo fits one device, where data parallelism alone wins and no schedule matters).
    auto r = search(request, {{"pipeline-sizes", {4}}, {"tensor-sizes", {1}}});
    INFO(r.errorText());
    REQUIRE(r.ok());
    const auto config = zeroBubbleSearchChosen(*r.plan);
    INFO(note(r));
    CHECK_FALSE(config.kind.empty());
    CHECK(note(r).find("faster than 1f1b") != std::string::npos);
    CHECK(validate(generateSchedule(*r.plan), *r.plan).ok);
    // The simulator ranks it as the estimate does: faster than 1F1B with the same sizes.
    auto plain = config;
    plain.kind.clear();
    plain.v = 1;
    const auto zb = simulate(*r.plan);
    const auto oneF = simulate(megatron::configPlan(request, plain));
    CHECK(zb.throughput_samples_per_s > oneF.throughput_samples_per_s);
    CHECK(megatron::estimate(*r.plan, config).throughput_samples_per_s
        > megatron::estimate(megatron::configPlan(request, plain), plain).throughput_samples_per_s);
    CHECK(zb.fitsMemory());
    // Every kind was a candidate.
    for (const std::string kind : {"1f1b", "interleaved", "zb-h1", "zb-h2", "zbv"})
        CHECK(std::any_of(r.candidates.begin(), r.candidates.end(),
            [&](const Candidate& c) { return c.config.at("schedule") == kind; }));
}

TEST_CASE(
    "under tight memory megatron picks a zero-bubble kind that fits and says what did not", "[zero-bubble][megatron]")
{
    // ZB-H2 stashes 2p - 1 microbatches where ZB-H1 and ZBV stash 1F1B's p: a capacity between the two leaves
    // zb-h2 out. Links of 50 us latency make zbv's twice as many transfers cost something.
    const int p = 4, m = 12;
    const auto roomy = zeroBubbleSearchChain(16, p, 1, 1, 1, 80e9, 5e-5);
    const megatron::Config h1 {p, 1, 1, 1, 1, Recompute::None, m, "zb-h1"},
        h2 {p, 1, 1, 1, 1, Recompute::None, m, "zb-h2"};
    const double fits = megatron::estimate(megatron::configPlan(roomy, h1), h1).peak_memory_bytes;
    const double over = megatron::estimate(megatron::configPlan(roomy, h2), h2).peak_memory_bytes;
    REQUIRE(over > fits);
    const auto tight = zeroBubbleSearchChain(16, p, 1, 1, 1, (fits + over) / 2, 5e-5);
    const json params = {{"pipeline-sizes", {p}}, {"microbatch-sizes", {1}}, {"recompute", "off"}, {"chunks", {1}}};
    auto r = search(tight, params, m);
    INFO(r.errorText());
    REQUIRE(r.ok());
    const auto config = zeroBubbleSearchChosen(*r.plan);
    INFO(note(r));
    CHECK((config.kind == "zb-h1" || config.kind == "zbv"));
    CHECK(simulate(*r.plan).fitsMemory());
    CHECK(note(r).find("(over memory): chose " + config.kind) != std::string::npos);
    const auto rejected = std::find_if(r.candidates.begin(), r.candidates.end(),
        [](const Candidate& c) { return c.config.at("schedule") == "zb-h2"; });
    REQUIRE(rejected != r.candidates.end());
    CHECK_FALSE(rejected->feasible);
    CHECK(rejected->reason.find("memory") != std::string::npos);
    // With room for it, zb-h2 wins: no bubble with T_F = T_B = T_W and fewer transfers than zbv.
    auto free = search(roomy, params, m);
    REQUIRE(free.ok());
    CHECK(zeroBubbleSearchChosen(*free.plan).kind == "zb-h2");
}

TEST_CASE("the request's schedule kind and the zero-bubble option narrow megatron's search", "[zero-bubble][megatron]")
{
    const auto request = zeroBubbleSearchChain(16, 4, 1, 1, 1);
    SECTION("--schedule zbv searches zbv alone and places its chunks in a V")
    {
        auto fixed = request;
        fixed.options.schedule.kind = "zbv";
        auto r = search(fixed, {{"recompute", "off"}}, 16);
        INFO(r.errorText());
        REQUIRE(r.ok());
        CHECK(r.plan->schedule.kind == "zbv");
        for (const auto& c : r.candidates)
            CHECK(c.config.at("schedule") == "zbv");
        const int p = r.plan->pipelineDepth();
        for (int s = p; s < r.plan->stageCount(); ++s)
            CHECK(r.plan->stages[s].devices == r.plan->stages[2 * p - 1 - s].devices);
        CHECK(validate(generateSchedule(*r.plan), *r.plan).ok);
    }
    SECTION("zero-bubble=false keeps Megatron's own kinds")
    {
        auto r = search(request, {{"zero-bubble", false}}, 16);
        REQUIRE(r.ok());
        CHECK((r.plan->schedule.kind == "1f1b" || r.plan->schedule.kind == "interleaved"));
        for (const auto& c : r.candidates)
            CHECK((c.config.at("schedule") == "1f1b" || c.config.at("schedule") == "interleaved"));
    }
    SECTION("a kind megatron does not make is replaced, and the note says by what")
    {
        auto other = request;
        other.options.schedule.kind = "gpipe";
        auto r = search(other, json::object(), 16);
        REQUIRE(r.ok());
        CHECK(std::any_of(r.diagnostics.begin(), r.diagnostics.end(), [](const Diagnostic& d) {
            return d.code == "schedule-kind"
                && d.message.find("zb-h1, zb-h2, zbv, dualpipev, v-half and v-min") != std::string::npos;
        }));
    }
    SECTION("--schedule zb-h2 with too few microbatches says why nothing was searched")
    {
        auto fixed = request;
        fixed.options.schedule.kind = "zb-h2";
        auto r = search(fixed, {{"pipeline-sizes", {4}}, {"microbatch-sizes", {1}}}, 4);
        CHECK_FALSE(r.ok());
        CHECK(r.errorText().find("m >= 2p - 1") != std::string::npos);
    }
}

TEST_CASE("PipeDream's DP counts a zero-bubble kind's stashes on every stage", "[zero-bubble][pipedream]")
{
    // zb-h1 stashes the first stage's p microbatches on every stage, where 1F1B's last stage holds one: with the
    // stash-heavy layers at the end, the compute-balanced split (two layers a stage) needs 4 x 6 MB on the last
    // stage. The DP must see that and cut elsewhere; the simulator then finds the plan within memory.
    auto model = pw::test::uniformChain(8, {1, 2, 1e5, 1e5, {}});
    for (int l = 0; l < 8; ++l)
        model.layers[l].stashed_bytes = l >= 6 ? 3e6 : 0.5e6;
    PartitionRequest request;
    request.model = model;
    const double memory = 20e6;
    request.cluster = pw::test::uniformCluster(1, 4, {memory, 100, 1e11, 1e-6, 0, 0});
    request.options.straight = true;
    request.options.memory_limit = true;
    request.options.schedule.kind = "zb-h1";
    request.options.schedule.microbatches = 8;
    auto r = findPartitioner("pipedream")->partition(request, {}, {});
    INFO(r.errorText());
    REQUIRE(r.ok());
    CHECK(r.plan->schedule.kind == "zb-h1");
    const auto sim = simulate(*r.plan);
    CHECK(sim.fitsMemory());
    CHECK(r.plan->stages.back().layerCount() == 1);
    const auto zbNote = std::find_if(
        r.diagnostics.begin(), r.diagnostics.end(), [](const Diagnostic& d) { return d.code == "zero-bubble"; });
    REQUIRE(zbNote != r.diagnostics.end());
    CHECK(zbNote->message.find("zb-h1 stashes 4 microbatches on every stage") != std::string::npos);
    // The balanced split the DP would take under 1F1B's counts does not fit under zb-h1's.
    auto oneF = request;
    oneF.options.schedule.kind = "1f1b";
    auto plain = findPartitioner("pipedream")->partition(oneF, {}, {});
    REQUIRE(plain.ok());
    auto balanced = *plain.plan;
    balanced.schedule.kind = "zb-h1";
    REQUIRE(balanced.stages.back().layerCount() > 1);
    CHECK_FALSE(simulate(balanced).fitsMemory());
    // zb-h2 stashes 2p - 1 = 7 on every stage: no straight split of these layers fits 20 MB.
    auto h2 = request;
    h2.options.schedule.kind = "zb-h2";
    CHECK_FALSE(findPartitioner("pipedream")->partition(h2, {}, {}).ok());
}

TEST_CASE("PipeDream re-cuts its stages into zbv's V with two chunks", "[zero-bubble][pipedream]")
{
    PartitionRequest request;
    request.model = pw::test::uniformChain(16);
    request.cluster = pw::test::uniformCluster(1, 4);
    request.options.straight = true;
    request.options.schedule.kind = "zbv";
    request.options.schedule.chunks = 2;
    request.options.schedule.microbatches = 8;
    auto r = findPartitioner("pipedream")->partition(request, {}, {});
    INFO(r.errorText());
    REQUIRE(r.ok());
    REQUIRE(r.plan->stageCount() == 8);
    for (int s = 4; s < 8; ++s)
        CHECK(r.plan->stages[s].devices == r.plan->stages[7 - s].devices);
    CHECK(validate(generateSchedule(*r.plan), *r.plan).ok);
    CHECK(std::any_of(r.diagnostics.begin(), r.diagnostics.end(), [](const Diagnostic& d) {
        return d.code == "zero-bubble" && d.message.find("zbv stashes 4 microbatches") != std::string::npos;
    }));
}

TEST_CASE("PipeDream's DP counts what a zero-bubble I keeps for its W", "[zero-bubble][pipedream]")
{
    // The same shape as above, but the last layers' weight-gradient inputs are what is heavy: 1F1B (a fused
    // backward) never holds them, zb-h1 holds them for every microbatch between its I and its W.
    auto model = pw::test::uniformChain(8, {1, 2, 1e5, 1e5, {}});
    for (int l = 0; l < 8; ++l) {
        model.layers[l].stashed_bytes = 0.5e6;
        model.layers[l].weight_gradient_bytes = l >= 6 ? 3e6 : 0;
    }
    PartitionRequest request;
    request.model = model;
    request.cluster = pw::test::uniformCluster(1, 4, {20e6, 100, 1e11, 1e-6, 0, 0});
    request.options.straight = true;
    request.options.memory_limit = true;
    request.options.schedule.microbatches = 8;
    request.options.schedule.kind = "1f1b";
    auto plain = findPartitioner("pipedream")->partition(request, {}, {});
    REQUIRE(plain.ok());
    REQUIRE(plain.plan->stages.back().layerCount() > 1); // under 1F1B the balanced split fits
    auto balanced = *plain.plan;
    balanced.schedule.kind = "zb-h1";
    CHECK_FALSE(simulate(balanced).fitsMemory());

    request.options.schedule.kind = "zb-h1";
    auto r = findPartitioner("pipedream")->partition(request, {}, {});
    INFO(r.errorText());
    REQUIRE(r.ok());
    CHECK(r.plan->stages.back().layerCount() == 1);
    CHECK(simulate(*r.plan).fitsMemory());
}

TEST_CASE("under memory only V-Min's activations fit, megatron picks v-min and the simulator agrees",
    "[zero-bubble][megatron][controllable-memory]")
{
    // 24 layers on p = 6 devices, m = 12: 1F1B and the zero-bubble kinds stash about p stage activations, V-Half
    // (p + 2) // 2 = 4 and V-Min (p + 4) // 3 = 3 microbatches' worth. A capacity between V-Min's estimate and
    // V-Half's leaves V-Min alone.
    const int p = 6, m = 12;
    const auto roomy = zeroBubbleSearchChain(24, p, 1, 1, 1);
    const auto memoryOf = [&](const std::string& kind) {
        const megatron::Config c {p, 1, 1, 1, megatron::vShaped(kind) ? 2 : 1, Recompute::None, m, kind};
        return megatron::estimate(megatron::configPlan(roomy, c), c).peak_memory_bytes;
    };
    const double vMin = memoryOf("v-min"), vHalf = memoryOf("v-half");
    REQUIRE(vMin < vHalf);
    for (const std::string kind : {"zb-h1", "zb-h2", "zbv", "dualpipev"}) {
        INFO(kind);
        REQUIRE(memoryOf(kind) > vHalf);
    }
    const auto tight = zeroBubbleSearchChain(24, p, 1, 1, 1, (vMin + vHalf) / 2);
    const json params = {{"pipeline-sizes", {p}}, {"microbatch-sizes", {1}}, {"recompute", "off"}};
    auto r = search(tight, params, m);
    INFO(r.errorText());
    REQUIRE(r.ok());
    INFO(note(r));
    CHECK(zeroBubbleSearchChosen(*r.plan).kind == "v-min");
    const auto sim = simulate(*r.plan);
    CHECK(sim.fitsMemory());
    // The estimate's activations are the simulator's: the order replayed, not a bound.
    const auto minConfig = megatron::Config {p, 1, 1, 1, 2, Recompute::None, m, "v-min"};
    CHECK(megatron::estimate(*r.plan, minConfig).peak_memory_bytes == Approx(zeroBubbleSearchPeak(sim)).epsilon(0.01));
    for (const std::string kind : {"v-half", "v-min"})
        CHECK(std::any_of(r.candidates.begin(), r.candidates.end(),
            [&](const Candidate& c) { return c.config.at("schedule") == kind; }));
}
