// SPDX-License-Identifier: MIT
// Mutation fuzzing of every file the planner reads: a mutated input either loads or is rejected with an
// InputError; nothing else may escape, and whatever loads must plan, schedule and simulate or be rejected
// the same way.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "planner/errors.h"
#include "planner/io/graph_txt.h"
#include "planner/io/json_file.h"
#include "planner/partition/partitioner.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"
#include "planner/timeline.h"

using namespace pw::planner;
namespace fs = std::filesystem;

namespace {

std::string readAll(const fs::path& p)
{
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::string mutate(std::string s, std::mt19937& rng)
{
    static const std::string alphabet = "{}[]\",:0123456789-+.eE \n\tabcnull-truefalse/\\u";
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !s.empty(); ++e) {
        std::size_t at = rng() % s.size();
        switch (rng() % 6) {
        case 0:
            s[at] = alphabet[rng() % alphabet.size()];
            break;
        case 1:
            s.erase(at, 1 + rng() % 16);
            break;
        case 2:
            s.insert(at, 1, alphabet[rng() % alphabet.size()]);
            break;
        case 3:
            s.insert(at, s.substr(rng() % s.size(), 1 + rng() % 32));
            break;
        case 4:
            s.resize(at);
            break;
        default:
            s[at] = static_cast<char>(rng() % 256);
            break;
        }
    }
    return s;
}

template <typename Fn> void fuzz(const std::string& seed, int rounds, unsigned salt, Fn&& load)
{
    std::mt19937 rng(1234 + salt);
    int accepted = 0, rejected = 0;
    for (int i = 0; i < rounds; ++i) {
        auto input = mutate(seed, rng);
        try {
            load(input);
            ++accepted;
        } catch (const InputError&) {
            ++rejected;
        } catch (const std::exception& e) {
            FAIL("round " << i << ": " << typeid(e).name() << ": " << e.what() << "\ninput:\n"
                          << input.substr(0, 2000));
        }
    }
    CHECK(rejected > 0);
    INFO("accepted " << accepted);
}

/// Writes the text to a file and loads it, as the CLI would.
template <typename Loader> auto viaFile(const std::string& text, Loader&& loader)
{
    auto path = fs::temp_directory_path() / ("pw-fuzz-" + std::to_string(::getpid()) + ".json");
    {
        std::ofstream f(path, std::ios::binary);
        f << text;
    }
    return loader(path.string());
}

nlohmann::json smallModelJson()
{
    auto model = loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json");
    model.layers.resize(5);
    return toJson(model);
}

} // namespace

TEST_CASE("mutated model, cluster and graph files are loaded or rejected cleanly", "[fuzz]")
{
    fuzz(smallModelJson().dump(1), 1500, 1, [](const std::string& t) { viaFile(t, loadModel); });
    fuzz(readAll(std::string(PW_DEMO_DIR) + "/hetpipe-cluster.json"), 1500, 2,
        [](const std::string& t) { viaFile(t, loadCluster); });
    auto graph = readAll(std::string(PW_PROFILES_DIR) + "/pipedream/alexnet/graph.txt");
    fuzz(graph, 1500, 3, [](const std::string& t) {
        std::istringstream in(t);
        readGraphTxt(in, "fuzz.txt");
    });
}

TEST_CASE("mutated plans are rejected or plan, schedule and simulate", "[fuzz]")
{
    auto model = modelFromJson(smallModelJson());
    auto cluster = loadCluster(std::string(PW_DEMO_DIR) + "/dgx-h100.json");
    PartitionOptions o;
    o.devices = 4;
    o.schedule.microbatches = 4;
    auto plan = findPartitioner("uniform")->partition({model, cluster, o}, {}, {});
    REQUIRE(plan.ok());
    fuzz(toJson(*plan.plan).dump(1), 1500, 4, [](const std::string& t) {
        auto p = viaFile(t, loadPlan);
        auto schedule = generateSchedule(p);
        if (validate(schedule, p).ok)
            simulate(p, schedule, {false, false});
    });
}

TEST_CASE("mutated HetPipe plans and wsp schedules are rejected cleanly", "[fuzz]")
{
    // Several pipelines (stage "pipeline" fields), staleness, N_m and the wave push / pull actions.
    auto model = modelFromJson(smallModelJson());
    auto cluster = loadCluster(std::string(PW_DEMO_DIR) + "/hetpipe-cluster.json");
    PartitionOptions o;
    o.devices = 8;
    o.schedule.microbatches = 4;
    o.params = {{"policy", "ed"}, {"virtual-workers", 2}, {"in-flight", 2}, {"staleness", 1}};
    auto plan = findPartitioner("hetpipe")->partition({model, cluster, o}, {}, {});
    INFO(plan.errorText());
    REQUIRE(plan.ok());
    fuzz(toJson(*plan.plan).dump(1), 1000, 7, [](const std::string& t) {
        auto p = viaFile(t, loadPlan);
        auto schedule = generateSchedule(p);
        if (validate(schedule, p).ok)
            simulate(p, schedule, {false, false});
    });
    auto schedule = generateSchedule(*plan.plan);
    fuzz(toJson(schedule).dump(1), 1000, 8, [&](const std::string& t) {
        auto s = scheduleFromJson(viaFile(t, readJsonFile));
        validate(s, *plan.plan);
        simulate(*plan.plan, s, {false, false}); // unvalidated too: the simulator guards itself
    });
}

TEST_CASE("mutated schedules and timelines are rejected cleanly", "[fuzz]")
{
    auto model = modelFromJson(smallModelJson());
    auto cluster = loadCluster(std::string(PW_DEMO_DIR) + "/dgx-h100.json");
    PartitionOptions o;
    o.devices = 2;
    o.schedule.microbatches = 2;
    auto plan = findPartitioner("uniform")->partition({model, cluster, o}, {}, {});
    REQUIRE(plan.ok());
    auto schedule = generateSchedule(*plan.plan);
    auto sim = simulate(*plan.plan, schedule);
    fuzz(toJson(schedule).dump(1), 1500, 5, [&](const std::string& t) {
        auto s = scheduleFromJson(viaFile(t, readJsonFile));
        // A schedule that parses is checked before anything runs it, and the simulator, which the library
        // also offers without validation, rejects whatever is wrong on its own.
        validate(s, *plan.plan);
        simulate(*plan.plan, s, {false, false});
    });
    fuzz(toJson(sim.timeline).dump(1), 1500, 6,
        [](const std::string& t) { timelineFromJson(viaFile(t, readJsonFile)); });
}

TEST_CASE("mutated tensor-parallel plans are rejected or schedule and simulate", "[fuzz]")
{
    // Plan::tensor_parallel (docs/formats.md): a t = 2, p = 2 plan from the megatron search space.
    auto model = modelFromJson(smallModelJson());
    auto cluster = loadCluster(std::string(PW_DEMO_DIR) + "/dgx-h100.json");
    PartitionOptions o;
    o.devices = 4;
    o.schedule.microbatches = 4;
    o.params = {{"tensor-sizes", {2}}, {"pipeline-sizes", {2}}, {"global-batch", 16}};
    auto plan = findPartitioner("megatron")->partition({model, cluster, o}, {}, {});
    REQUIRE(plan.ok());
    REQUIRE(plan.plan->tensor_parallel == 2);
    fuzz(toJson(*plan.plan).dump(1), 1500, 7, [](const std::string& t) {
        auto p = viaFile(t, loadPlan);
        auto schedule = generateSchedule(p);
        if (validate(schedule, p).ok)
            simulate(p, schedule, {false, false});
    });
}

TEST_CASE("an all-reduce whose members name different stages is refused, not summed over another's buckets", "[fuzz]")
{
    // AddressSanitizer found it in the mutated HetPipe schedules above: the second member's stage had fewer gradient
    // buckets than the first's, and the simulator read past them. Here: 2 stages of 2 replicas each.
    auto model = modelFromJson(smallModelJson());
    auto cluster = loadCluster(std::string(PW_DEMO_DIR) + "/dgx-h100.json");
    PartitionOptions o;
    o.devices = 4;
    o.stages = 2;
    o.schedule.microbatches = 4;
    auto plan = findPartitioner("uniform")->partition({model, cluster, o}, {}, {});
    REQUIRE(plan.ok());
    auto schedule = generateSchedule(*plan.plan);
    REQUIRE(schedule.num_stages > 1);
    // The first member of the first replicas' all-reduce names the next stage instead of its own.
    Action* changed = nullptr;
    for (auto& actions : schedule.devices)
        for (auto& a : actions)
            if (!changed && a.kind == ActionKind::AllReduce
                && schedule.groups[static_cast<std::size_t>(a.group)].purpose == CollectivePurpose::Replicas)
                changed = &a;
    REQUIRE(changed);
    changed->stage = (changed->stage + 1) % schedule.num_stages;
    CHECK_THROWS_WITH(simulate(*plan.plan, schedule, {false, false}), Catch::Contains("joins an all-reduce of stage"));
}
