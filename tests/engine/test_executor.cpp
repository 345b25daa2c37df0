// SPDX-License-Identifier: MIT
// The stage executor: any plan of a synchronous schedule gives the single-device run's losses; asynchronous
// schedules use the weight versions their schedule names; learning reaches the corpus' entropy floor.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "engine/executor.h"
#include "engine/local_run.h"
#include "engine/transport.h"
#include "planner/errors.h"
#include "tests/engine/engine_fixtures.h"

using namespace pw::engine;
using pw::planner::ActionKind;
using pw::test::gpt2Plan;
using pw::test::StageCut;
using pw::test::tinyGpt2;
using pw::test::vOnFourDevices;

namespace {

DataOrder syntheticData(const TrainingSetup& s)
{
    DataSpec spec;
    spec.synthetic_tokens = 20000;
    return DataOrder(loadTokens(spec, s.model.vocab), s.microbatches, s.shape.batch, s.shape.seq);
}

LocalRunResult train(const pw::planner::Plan& plan, int steps, double lr = 1e-2)
{
    TrainingSetup setup = trainingSetup(plan);
    setup.adam.lr = lr;
    setup.adam.weight_decay = 0.1;
    return runLocally(plan, setup, syntheticData(setup), steps);
}

void requireSameLosses(const std::vector<double>& a, const std::vector<double>& b)
{
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
        INFO("step " << i);
        CHECK(a[i] == Approx(b[i]).epsilon(1e-4));
    }
}

} // namespace

TEST_CASE("every synchronous plan trains to the single device's losses", "[engine][executor]")
{
    const auto shape = tinyGpt2(3); // layers: embedding, 3 blocks, head
    const int steps = 6;
    const auto reference = train(gpt2Plan(shape, {{0, 4, {0}}}, "gpipe"), steps);
    REQUIRE(reference.losses.size() == steps);
    CHECK(reference.losses.back() < reference.losses.front());

    SECTION("2 stages, 1F1B")
    {
        requireSameLosses(train(gpt2Plan(shape, {{0, 1, {0}}, {2, 4, {1}}}, "1f1b"), steps).losses, reference.losses);
    }
    SECTION("3 stages, GPipe")
    {
        requireSameLosses(
            train(gpt2Plan(shape, {{0, 1, {0}}, {2, 2, {1}}, {3, 4, {2}}}, "gpipe"), steps).losses, reference.losses);
    }
    SECTION("4 stages, 1F1B, the head alone")
    {
        requireSameLosses(
            train(gpt2Plan(shape, {{0, 1, {0}}, {2, 2, {1}}, {3, 3, {2}}, {4, 4, {3}}}, "1f1b"), steps).losses,
            reference.losses);
    }
    SECTION("a replicated first stage (all-reduce)")
    {
        requireSameLosses(
            train(gpt2Plan(shape, {{0, 2, {0, 1}}, {3, 4, {2}}}, "1f1b"), steps).losses, reference.losses);
    }
    SECTION("interleaved 1F1B: 2 devices, 2 chunks")
    {
        const auto plan = gpt2Plan(shape, {{0, 1, {0}}, {2, 2, {1}}, {3, 3, {0}}, {4, 4, {1}}}, "interleaved", 4, 2);
        requireSameLosses(train(plan, steps).losses, reference.losses);
    }
}

TEST_CASE("zero-bubble plans train to 1F1B's losses and weights with 2 and 4 stages", "[engine][executor]")
{
    // The same math in another order: I and W instead of B, W later. Each zero-bubble plan against the 1F1B plan
    // of the same stages (zbv: the same virtual stages, each on a device of its own under 1F1B), so that every
    // stage sums the same gradients.
    const auto shape = tinyGpt2(6); // 8 layers: embedding, 6 blocks, head
    const int steps = 4, m = 8;
    const auto compare = [&](const pw::planner::Plan& zb, const pw::planner::Plan& reference) {
        const auto want = train(reference, steps);
        const auto got = train(zb, steps);
        REQUIRE(got.losses.size() == want.losses.size());
        for (std::size_t i = 0; i < want.losses.size(); ++i) {
            INFO("step " << i);
            CHECK(got.losses[i] == Approx(want.losses[i]).epsilon(1e-6));
        }
        CHECK(want.losses.back() < want.losses.front());
        REQUIRE(got.final_parameters.size() == want.final_parameters.size());
        // Weights to 1e-6 relative, or 1e-5 absolute near zero: the engine's own run-to-run noise (the OpenMP
        // threads' partial sums in the layer norms' gradients, which AdamW's normalised steps make visible in the
        // weights of near-zero gradients: biases) reaches 3e-6 between two runs of the same 1F1B plan.
        std::size_t off = 0;
        for (std::size_t i = 0; i < want.final_parameters.size(); ++i)
            if (got.final_parameters[i] != Approx(want.final_parameters[i]).epsilon(1e-6).margin(1e-5))
                off += 1;
        CHECK(off == 0);
        // Every I and W ran, as spans of their own kinds (dualpipev fuses some backwards: B, or I and W, once per
        // stage and microbatch).
        const auto schedule = runSchedule(zb, steps);
        std::map<ActionKind, std::size_t> actions, spans;
        for (const auto& device : schedule.devices)
            for (const auto& a : device)
                ++actions[a.kind];
        for (const auto& span : got.spans)
            ++spans[span.kind];
        CHECK(spans == actions);
        CHECK(actions[ActionKind::BackwardInput] == actions[ActionKind::BackwardWeight]);
        CHECK(actions[ActionKind::BackwardInput] + actions[ActionKind::Backward]
            == static_cast<std::size_t>(steps * m * zb.stageCount()));
        CHECK(actions[ActionKind::BackwardInput] > 0);
        CHECK(got.spans.size() == schedule.actionCount());
    };
    const std::vector<StageCut> two = {{0, 3, {0}}, {4, 7, {1}}};
    const std::vector<StageCut> four = {{0, 1, {0}}, {2, 3, {1}}, {4, 5, {2}}, {6, 7, {3}}};
    for (const char* kind : {"zb-h1", "zb-h2"}) {
        SECTION(std::string(kind) + " 2 stages")
        {
            compare(gpt2Plan(shape, two, kind, m), gpt2Plan(shape, two, "1f1b", m));
        }
        SECTION(std::string(kind) + " 4 stages")
        {
            compare(gpt2Plan(shape, four, kind, m), gpt2Plan(shape, four, "1f1b", m));
        }
    }
    SECTION("zb-h1 with a replicated stage: its all-reduce's buckets follow its last W")
    {
        const std::vector<StageCut> replicated = {{0, 3, {0, 1}}, {4, 7, {2}}};
        compare(gpt2Plan(shape, replicated, "zb-h1", m), gpt2Plan(shape, replicated, "1f1b", m));
    }
    SECTION("zbv with two copies of the V: each device sums its two copies of wte before the all-reduces")
    {
        const std::vector<StageCut> v = {{0, 1, {0, 2}}, {2, 3, {1, 3}}, {4, 5, {1, 3}}, {6, 7, {0, 2}}};
        const std::vector<StageCut> straight = {{0, 1, {0, 1}}, {2, 3, {2, 3}}, {4, 5, {4, 5}}, {6, 7, {6, 7}}};
        compare(gpt2Plan(shape, v, "zbv", m, 2), gpt2Plan(shape, straight, "1f1b", m));
    }
    SECTION("zbv 2 devices: 4 virtual stages in a V")
    {
        const std::vector<StageCut> v = {{0, 1, {0}}, {2, 3, {1}}, {4, 5, {1}}, {6, 7, {0}}};
        compare(gpt2Plan(shape, v, "zbv", m, 2), gpt2Plan(shape, four, "1f1b", m));
    }
    SECTION("zbv 4 devices: 8 virtual stages in a V")
    {
        const auto [v, straight] = vOnFourDevices();
        compare(gpt2Plan(shape, v, "zbv", m, 2), gpt2Plan(shape, straight, "1f1b", m));
    }
    SECTION("dualpipev 2 devices: 4 virtual stages in a V, F&B pairs")
    {
        const std::vector<StageCut> v = {{0, 1, {0}}, {2, 3, {1}}, {4, 5, {1}}, {6, 7, {0}}};
        compare(gpt2Plan(shape, v, "dualpipev", m, 2), gpt2Plan(shape, four, "1f1b", m));
    }
    SECTION("dualpipev 4 devices: 8 virtual stages in a V, the 8 microbatches it needs")
    {
        const auto [v, straight] = vOnFourDevices();
        compare(gpt2Plan(shape, v, "dualpipev", m, 2), gpt2Plan(shape, straight, "1f1b", m));
    }
    SECTION("v-half and v-min 4 devices: 8 virtual stages in a V, the authors' greedy order")
    {
        const auto [v, straight] = vOnFourDevices();
        for (const char* kind : {"v-half", "v-min"}) {
            INFO(kind);
            compare(gpt2Plan(shape, v, kind, m, 2), gpt2Plan(shape, straight, "1f1b", m));
        }
    }
}

TEST_CASE("every action of the schedule runs once and is reported as a span", "[engine][executor]")
{
    const auto plan = gpt2Plan(tinyGpt2(), {{0, 1, {0}}, {2, 3, {1}}}, "1f1b");
    const int steps = 3;
    const auto result = train(plan, steps);
    const auto schedule = runSchedule(plan, steps);
    CHECK(result.spans.size() == schedule.actionCount());
    std::set<std::pair<int, int>> seen;
    for (const auto& s : result.spans) {
        CHECK(seen.insert({s.device, s.action}).second);
        const auto& a = schedule.devices[static_cast<std::size_t>(s.device)][static_cast<std::size_t>(s.action)];
        CHECK(a.kind == s.kind);
        CHECK(s.t1 >= s.t0);
    }
}

TEST_CASE("the tied embedding is summed in an all-reduce of its own, and a schedule without it is refused",
    "[engine][executor]")
{
    // issue 30 item 11: the engine summed it inside the optimizer step, which the simulator could not see.
    const auto plan = gpt2Plan(tinyGpt2(), {{0, 1, {0}}, {2, 3, {1}}}, "1f1b");
    const int steps = 2;
    const auto result = train(plan, steps);
    const TrainingSetup setup = trainingSetup(plan);
    const double wte = static_cast<double>(setup.model.padded_vocab) * setup.model.channels * 4; // fp32 gradient
    std::map<int, int> tied; // device -> its tied all-reduces
    for (const auto& s : result.spans)
        if (s.kind == ActionKind::AllReduce) {
            CHECK(s.bytes == wte);
            ++tied[s.device];
        }
    CHECK(tied == std::map<int, int> {{0, steps}, {1, steps}});
    // The same schedule without it (an older planner's) is refused, not trained with copies drifting apart.
    auto schedule = runSchedule(plan, 1);
    for (auto& list : schedule.devices)
        std::erase_if(list, [](const pw::planner::Action& a) { return a.kind == ActionKind::AllReduce; });
    schedule.groups.clear();
    LocalFabric fabric(2);
    const DataOrder data = syntheticData(setup);
    CHECK_THROWS_WITH(DeviceExecutor(plan, schedule, 0, setup, data, fabric.endpoint(0), {}, 1),
        Catch::Contains("device 0 holds one copy of the tied embedding, but its schedule has no all-reduce of a "
                        "tied_weights group"));
}

TEST_CASE("PipeDream's backwards use the weights their forwards used", "[engine][executor]")
{
    // Weight stashing: stage 0 forwards microbatches with versions that later steps overwrite; its backward must
    // find the stashed copy (the executor throws when a version is missing) and the spans record the versions.
    const auto plan = gpt2Plan(tinyGpt2(), {{0, 1, {0}}, {2, 3, {1}}}, "pipedream", 4);
    const auto result = train(plan, 4, 3e-3);
    std::map<std::pair<int, int>, int> forwardVersion;
    int stale = 0;
    for (const auto& s : result.spans)
        if (s.kind == pw::planner::ActionKind::Forward)
            forwardVersion[{s.stage, s.microbatch}] = s.weight_version;
    std::map<int, int> latest; // stage -> newest version produced so far
    for (const auto& s : result.spans) {
        if (s.kind == pw::planner::ActionKind::Backward) {
            CHECK(s.weight_version == forwardVersion.at({s.stage, s.microbatch}));
            stale += s.weight_version < latest[s.stage] ? 1 : 0;
        }
        if (s.kind == pw::planner::ActionKind::OptimizerStep)
            latest[s.stage] = std::max(latest[s.stage], s.weight_version);
    }
    CHECK(stale > 0); // some backwards really did use an older version than the stage's newest
    CHECK(result.losses.back() < result.losses.front());
}

TEST_CASE("2BW runs with its two weight versions", "[engine][executor]")
{
    const auto plan = gpt2Plan(tinyGpt2(), {{0, 1, {0}}, {2, 3, {1}}}, "2bw", 4);
    const auto result = train(plan, 5, 3e-3);
    CHECK(result.losses.back() < result.losses.front());
    for (const auto& s : result.spans)
        if (s.kind == pw::planner::ActionKind::Forward)
            CHECK(s.weight_version == std::max(s.microbatch / 4 - 1, 0)); // the digest's rule: max(k/m - 1, 0)
}

TEST_CASE("training reaches the synthetic corpus' entropy floor", "[engine][executor]")
{
    constexpr int kSteps = 500;
    // A 2-block model on a 32-token Markov chain: its entropy rate is the lowest loss any model can reach.
    auto shape = tinyGpt2(2, 8);
    shape.hidden = 32;
    const auto plan = gpt2Plan(shape, {{0, 1, {0}}, {2, 3, {1}}}, "1f1b", 2);
    TrainingSetup setup = trainingSetup(plan);
    setup.adam.lr = 1e-2;
    setup.adam.warmup_steps = 20;
    setup.adam.cosine = true;
    setup.adam.lr_min_fraction = 0.1;
    setup.adam.total_steps = kSteps;
    DataSpec spec;
    spec.synthetic_tokens = 100000;
    const double floor = syntheticEntropy(spec, setup.model.vocab);
    const auto result = runLocally(
        plan, setup, DataOrder(loadTokens(spec, setup.model.vocab), 2, setup.shape.batch, setup.shape.seq), kSteps);
    double tail = 0;
    for (int i = kSteps - 50; i < kSteps; ++i)
        tail += result.losses[static_cast<std::size_t>(i)] / 50;
    INFO("floor " << floor << " nats, start " << result.losses.front() << ", last 50 steps " << tail);
    CHECK(result.losses.front() > floor + 1.5);
    CHECK(tail < floor + 0.1);
}

TEST_CASE("plans the engine cannot train are refused with the reason", "[engine][executor]")
{
    auto plan = pw::test::chainPlan(2, 4);
    CHECK_THROWS_WITH(trainingSetup(plan), Catch::Contains("has no transformer shape"));
    auto tp = gpt2Plan(tinyGpt2(), {{0, 3, {0, 1, 2, 3}}}, "1f1b");
    tp.tensor_parallel = 2;
    CHECK_NOTHROW(trainingSetup(tp)); // the engine splits 2 heads over 2 ranks
    tp.tensor_parallel = 4;
    CHECK_THROWS_WITH(trainingSetup(tp), Catch::Contains("t = 4 ranks, and it has 2 heads, not a multiple of 4"));
    tp.tensor_parallel = 2;
    tp.schedule.sequence_parallel = true;
    tp.schedule.tp_comm_overlap = true;
    CHECK_THROWS_WITH(trainingSetup(tp), Catch::Contains("not overlapped with them"));
}

TEST_CASE("settings the engine does not honour are refused, naming the plan's field, never trained otherwise",
    "[engine][executor]")
{
    const auto base = gpt2Plan(tinyGpt2(), {{0, 1, {0}}, {2, 3, {1}}}, "1f1b");
    CHECK_NOTHROW(trainingSetup(base));
    const auto refused = [&](auto change, const std::string& field, const std::string& text) {
        auto plan = base;
        change(plan);
        try {
            trainingSetup(plan);
            FAIL("accepted a plan with " << field);
        } catch (const pw::planner::InputError& e) {
            CHECK(e.field() == field);
            CHECK_THAT(e.message(), Catch::Contains(text));
        }
    };
    // A change to the plan's model architecture, as refused() takes changes.
    const auto architecture = [](auto change) {
        return [change](auto& p) {
            auto model = *p.model;
            change(*model.architecture);
            p.model = model;
        };
    };
    refused([](auto& p) { p.schedule.precision = "bf16"; }, "/schedule/precision", "trains in fp32 only");
    refused(architecture([](auto& a) {
        a.bytes_per_element = 2; // `profile transformer`'s default
    }),
        "/model/architecture/bytes_per_element", "--bytes-per-element 4");
    refused([](auto& p) { p.schedule.gradient_precision = "bf16"; }, "/schedule/gradient_precision",
        "its weights' precision (fp32)");
    refused([](auto& p) { p.schedule.optimizer = "sgd"; }, "/schedule/optimizer", "AdamW only");
    // The distributed optimizer (ZeRO 1) trains; ZeRO 2 and 3, hybrid sharding, and a schedule updating each replica
    // on its own are refused.
    {
        auto zero1 = base;
        zero1.schedule.distributed_optimizer = true;
        CHECK_NOTHROW(trainingSetup(zero1));
    }
    refused([](auto& p) { pw::planner::setZeroStage(p.schedule, 2); }, "/schedule/shard_gradients", "ZeRO stage 2");
    refused([](auto& p) { pw::planner::setZeroStage(p.schedule, 3); }, "/schedule/shard_weights", "ZeRO stage 3");
    refused(
        [](auto& p) {
            p.schedule.distributed_optimizer = true;
            p.schedule.shard_group = 1;
        },
        "/schedule/shard_group", "(HSDP)");
    refused(
        [](auto& p) {
            p.schedule.distributed_optimizer = true;
            p.schedule.kind = "pipedream";
        },
        "/schedule/distributed_optimizer", "updates each replica (or pipeline) on its own");
    // A block no family builds (GPT-2's with one Llama field): refused at the first field in which it differs from
    // GPT-2's, the family whose learned positions it has.
    refused(architecture([](auto& a) {
        a.mlp = pw::planner::MlpKind::SwiGlu;
        a.family = "gpt-swiglu";
    }),
        "/model/architecture/mlp", "a gpt-swiglu transformer: the engine trains GPT-2's block and Llama's");
    refused(architecture([](auto& a) { a.kv_heads = 1; }), "/model/architecture/kv_heads",
        "differs from GPT-2's in kv_heads and from Llama's in mlp");
    // Zero-bubble schedules split the backward into I and W, which the engine computes apart.
    for (const char* kind : {"zb-h1", "zb-h2"}) {
        auto zb = base;
        zb.schedule.kind = kind;
        CHECK_NOTHROW(trainingSetup(zb));
    }
    refused(architecture([](auto& a) {
        a.layers = 4; // the profile still lists 2 blocks' layers
    }),
        "/model/layers", "the embedding, the 4 blocks and the head");
    // A bf16 profile planned with --precision fp32 is what the engine trains.
    auto bf16Shape = tinyGpt2();
    bf16Shape.bytes_per_element = 2;
    auto fp32 = gpt2Plan(bf16Shape, {{0, 1, {0}}, {2, 3, {1}}}, "1f1b");
    fp32.schedule.precision = "fp32";
    // An architecture that does not describe the profile's layers (a hand-edited sequence, hidden size,
    // microbatch or precision) is another model than the one planned: refused, naming the field.
    refused(architecture([](auto& a) { a.sequence *= 2; }), "/model/layers/1/activation_bytes",
        "describe different models");
    refused(architecture([](auto& a) { a.microbatch = 1000; }), "/model/architecture/microbatch",
        "1000, but the profile's layers are of microbatches of 2");
    CHECK_NOTHROW(trainingSetup(fp32));
    CHECK(trainingSetup(fp32).precision == Precision::Fp32);
}

TEST_CASE("on CUDA a bf16 plan trains in bf16 mixed precision, and only that mix", "[engine][executor]")
{
    const auto base = gpt2Plan(tinyGpt2(), {{0, 1, {0}}, {2, 3, {1}}}, "1f1b");
    auto bf16 = base;
    bf16.schedule.precision = "bf16";
    CHECK(trainingSetup(bf16, TrainsOn::Cuda).precision == Precision::Bf16Mixed);
    CHECK(trainingSetup(base, TrainsOn::Cuda).precision == Precision::Fp32);
    auto fp32Gradients = bf16; // Megatron's default: 18 B per parameter, not what the engine keeps
    fp32Gradients.schedule.gradient_precision = "fp32";
    CHECK_THROWS_WITH(trainingSetup(fp32Gradients, TrainsOn::Cuda), Catch::Contains("its weights' precision (bf16)"));
    auto fp16 = base;
    fp16.schedule.precision = "fp16";
    CHECK_THROWS_WITH(trainingSetup(fp16, TrainsOn::Cuda), Catch::Contains("weights are fp16"));
}

TEST_CASE("a schedule that flushes every step runs as one step repeated, with the full schedule's actions",
    "[engine][executor]")
{
    const auto shape = tinyGpt2(2);
    const int steps = 5;
    for (const auto& kind : {std::string("gpipe"), std::string("1f1b")}) {
        INFO(kind);
        const auto plan = gpt2Plan(shape, {{0, 1, {0, 1}}, {2, 3, {2}}}, kind);
        const auto program = runProgram(plan, steps);
        CHECK(program.repeats == steps);
        const auto full = runSchedule(plan, steps);
        CHECK(program.actionCount() == full.actionCount());
        for (int d = 0; d < full.num_devices; ++d) {
            const auto& period = program.period.devices[static_cast<std::size_t>(d)];
            const auto& all = full.devices[static_cast<std::size_t>(d)];
            for (std::size_t i = 0; i < all.size(); ++i) {
                auto a = repeatedAction(
                    period[i % period.size()], static_cast<int>(i / period.size()), program.period.microbatches);
                a.group = all[i].group; // groups compared by their members below
                CHECK(a == all[i]);
            }
        }
        // Same losses as the whole schedule written out.
        requireSameLosses(train(plan, steps).losses, train(gpt2Plan(shape, {{0, 3, {0}}}, kind), steps).losses);
    }
    SECTION("asynchronous schedules are written out whole")
    {
        const auto plan = gpt2Plan(shape, {{0, 1, {0}}, {2, 3, {1}}}, "pipedream");
        CHECK(runProgram(plan, steps).repeats == 1);
    }
}
