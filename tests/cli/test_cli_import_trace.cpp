// SPDX-License-Identifier: MIT
// Runs from another runtime (issue 35 item 3): PyTorch profiler traces of a torch.distributed.pipelining run of an
// exported plan, one per rank, land in the history as a measured run of the plan with every action matched, its
// ranks' clocks aligned, its per-kind error table and time by cause; a trace of another plan is refused naming the
// first mismatch, and nothing is recorded. The traces here are made from a simulated run, in the Kineto JSON form
// torch's runtime writes ("PP:{action}" user annotations, "Optimizer.step#AdamW.step", distributedInfo).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "app/run/trace_import.h"
#include "cli_harness.h"
#include "planner/errors.h"
#include "planner/export/export.h"
#include "planner/io/json_file.h"
#include "planner/schedule/generator.h"
#include "planner/sim/simulator.h"
#include "tests/engine/python_oracle.h"
#include "tests/skip.h"

using Catch::Contains;
using nlohmann::json;

namespace {

namespace fs = std::filesystem;

struct TempDir
{
    fs::path path = fs::temp_directory_path() / ("pw-import-trace-" + std::to_string(::getpid()));
    TempDir() { fs::create_directories(path); }
    ~TempDir() { fs::remove_all(path); }
};

/// torch's name of a schedule action of `plan` ({stage}{F|B|I|W}{local mb}, {stage}SEND_F{mb}, ...), or "".
std::string torchName(const pw::planner::Action& a, int microbatches)
{
    const int mb = a.microbatch % microbatches; // each step numbers its microbatches from 0
    switch (a.kind) {
    case pw::planner::ActionKind::Forward:
        return std::to_string(a.stage) + "F" + std::to_string(mb);
    case pw::planner::ActionKind::Backward:
        return std::to_string(a.stage) + "B" + std::to_string(mb);
    case pw::planner::ActionKind::BackwardInput:
        return std::to_string(a.stage) + "I" + std::to_string(mb);
    case pw::planner::ActionKind::BackwardWeight:
        return std::to_string(a.stage) + "W" + std::to_string(mb);
    case pw::planner::ActionKind::SendActivation:
        return std::to_string(a.stage) + "SEND_F" + std::to_string(mb);
    case pw::planner::ActionKind::SendGradient:
        return std::to_string(a.stage) + "SEND_B" + std::to_string(mb);
    case pw::planner::ActionKind::RecvActivation: // torch names a receive by its receiving stage
        return std::to_string(a.stage + 1) + "RECV_F" + std::to_string(mb);
    case pw::planner::ActionKind::RecvGradient:
        return std::to_string(a.stage - 1) + "RECV_B" + std::to_string(mb);
    default:
        return "";
    }
}

/// Kineto's device annotations: a GPU run's trace has, beside each action's host annotation, one on the GPU's stream
/// around its kernels (later than the host's, by `lag_s` here), for every action that ran a kernel.
struct DeviceAnnotations
{
    double lag_s = 0;
    bool compute = false; ///< the compute actions ran kernels
    bool transfers = false; ///< the transfers did (NCCL's); Gloo's from host memory do not
};

/// The traces a torch.distributed.pipelining run of `ran` over `steps` steps would write, one per rank (the device of
/// stage r), its times from the simulator; rank r's clock `skew_s` x r ahead.
std::vector<fs::path> writeTraces(
    const fs::path& dir, const pw::planner::Plan& ran, int steps, double skew_s, const DeviceAnnotations& gpu = {})
{
    pw::planner::Plan p = ran;
    p.schedule.iterations = steps;
    const auto schedule = pw::planner::generateSchedule(p);
    const auto sim = pw::planner::simulate(p, schedule);
    std::map<std::pair<int, int>, const pw::planner::Span*> spans;
    for (const auto& s : sim.timeline.spans)
        spans[{s.device, s.action}] = &s;
    std::vector<fs::path> files;
    for (int rank = 0; rank < ran.pipelineDepth(); ++rank) {
        const int device = ran.stages[static_cast<std::size_t>(rank)].devices.front();
        const auto& list = schedule.devices[static_cast<std::size_t>(device)];
        json events = json::array();
        const auto event = [&](const std::string& name, const std::string& cat, double t0, double t1) {
            events.push_back({{"ph", "X"}, {"cat", cat}, {"name", name}, {"pid", rank}, {"tid", 1},
                {"ts", (t0 + skew_s * rank) * 1e6}, {"dur", (t1 - t0) * 1e6}});
        };
        // Some noise a real trace has: an aten op and a kernel.
        event("aten::mm", "cpu_op", 0, 1e-6);
        for (std::size_t i = 0; i < list.size(); ++i) {
            const auto& a = list[i];
            const auto it = spans.find({device, static_cast<int>(i)});
            if (a.kind == pw::planner::ActionKind::OptimizerStep) {
                if (it != spans.end())
                    event("Optimizer.step#AdamW.step", "user_annotation", it->second->t0, it->second->t1);
                continue;
            }
            const std::string name = torchName(a, ran.schedule.microbatches);
            if (name.empty())
                continue;
            double t0 = 0, t1 = 0;
            if (it != spans.end()) {
                t0 = it->second->t0;
                t1 = it->second->t1;
            } else { // a receive the simulator did not wait for: posted just before the next compute
                for (std::size_t j = i + 1; j < list.size(); ++j)
                    if (const auto c = spans.find({device, static_cast<int>(j)}); c != spans.end()) {
                        t0 = t1 = c->second->t0;
                        break;
                    }
            }
            event("PP:" + name, "user_annotation", t0, t1);
            if (pw::planner::isCompute(a.kind) ? gpu.compute : gpu.transfers)
                event("PP:" + name, "gpu_user_annotation", t0 + gpu.lag_s, t1 + gpu.lag_s);
        }
        json trace {
            {"schemaVersion", 1}, {"distributedInfo", {{"backend", "nccl"}, {"rank", rank}}}, {"traceEvents", events}};
        files.push_back(dir / ("rank" + std::to_string(rank) + ".json"));
        std::ofstream(files.back()) << trace.dump();
    }
    return files;
}

pw::planner::Plan demoPlan()
{
    return pw::planner::loadPlan(pw::cli::test::kDemo + "/gpt2-tiny-local.plan.json");
}

} // namespace

TEST_CASE("import-trace: every action of an exported plan's traces is matched, the clocks aligned", "[cli][import]")
{
    TempDir dir;
    const auto plan = demoPlan();
    const auto traces = writeTraces(dir.path, plan, 3, 5.0); // rank 1's clock 5 s ahead
    const auto run = pw::app::importPipeliningTraces(plan, traces);
    CHECK(run.steps == 3);
    CHECK(run.source == "user_annotation");
    // Matched to the plan as torch.distributed.pipelining runs it: the demo's GPT-2 ties its head to its embedding
    // across the two stages, torch's stages share no weights, so the run has no all-reduce between them.
    CHECK(run.untied);
    CHECK(run.plan == pw::planner::findPlanExporter("torchtitan")->runsAs(plan));
    CHECK(run.plan.tiedWeightGroups(0).empty());
    // Every compute and transfer action of the program, and an optimizer step per rank and step.
    pw::planner::Plan p = plan;
    p.schedule.iterations = 3;
    const auto schedule = pw::planner::generateSchedule(p);
    int named = 0;
    for (const auto& list : schedule.devices)
        for (const auto& a : list)
            named += a.kind != pw::planner::ActionKind::AllReduce && a.kind != pw::planner::ActionKind::OptimizerStep;
    CHECK(run.matched == named);
    CHECK(run.measured.spans.size() == static_cast<std::size_t>(named + 2 * 3));
    // Rank 1 moved back onto rank 0's clock (to within the slack its dependencies leave).
    REQUIRE(run.clock_offsets_s.size() == 2);
    CHECK(run.clock_offsets_s[0] == 0);
    CHECK(run.clock_offsets_s[1] == Approx(-5.0).margin(0.01));
    CHECK(run.files == std::vector<std::string> {traces[0].string(), traces[1].string()});
    // The traces name their ranks: given in another order (as a shell's glob sorts rank10 before rank2), each is still
    // read as its own rank, and said to be.
    const auto reversed = pw::app::importPipeliningTraces(plan, {traces[1], traces[0]});
    CHECK(reversed.files == run.files);
    CHECK(reversed.measured == run.measured);
    // The compute spans keep the simulator's durations (by what they are: the action indices are the untied
    // program's, without the all-reduces).
    const auto sim = pw::planner::simulate(p, schedule);
    std::map<std::tuple<int, pw::planner::ActionKind, int, int>, double> durations;
    for (const auto& s : sim.timeline.spans)
        durations[{s.device, s.kind, s.stage, s.microbatch}] = s.t1 - s.t0;
    for (const auto& s : run.measured.spans)
        if (s.kind == pw::planner::ActionKind::Forward || s.kind == pw::planner::ActionKind::Backward)
            CHECK(s.t1 - s.t0 == Approx(durations.at({s.device, s.kind, s.stage, s.microbatch})).margin(1e-9));
}

TEST_CASE("import-trace takes device times where the trace has them, per compute and transfer", "[cli][import]")
{
    TempDir dir;
    const auto plan = demoPlan();
    const auto host = pw::app::importPipeliningTraces(plan, writeTraces(dir.path, plan, 2, 0));
    CHECK(host.source == "user_annotation");
    // A GPU run over Gloo (pipelining_run.py --cuda: both ranks on one GPU, which NCCL refuses): the compute actions
    // on the GPU's stream, the transfers on the host only. Every action still matched; compute from device times.
    constexpr double lag = 40e-6;
    const auto mixed = pw::app::importPipeliningTraces(plan, writeTraces(dir.path, plan, 2, 0, {lag, true, false}));
    CHECK(mixed.source == "gpu_user_annotation (compute), user_annotation (transfers)");
    CHECK(mixed.matched == host.matched);
    // Over NCCL both on the GPU.
    const auto nccl = pw::app::importPipeliningTraces(plan, writeTraces(dir.path, plan, 2, 0, {lag, true, true}));
    CHECK(nccl.source == "gpu_user_annotation");
    CHECK(nccl.matched == host.matched);
    REQUIRE(mixed.measured.spans.size() == host.measured.spans.size());
    REQUIRE(nccl.measured.spans.size() == host.measured.spans.size());
    // The timelines start at their first action: against the host's, the device-timed compute keeps its place, and
    // the mixed run's host-timed transfers come the lag earlier.
    const auto firstForward = [](const pw::app::ImportedRun& r) {
        const auto f = std::find_if(r.measured.spans.begin(), r.measured.spans.end(),
            [](const pw::planner::Span& s) { return s.kind == pw::planner::ActionKind::Forward; });
        REQUIRE(f != r.measured.spans.end());
        return f->t0;
    };
    const double mixedShift = firstForward(mixed) - firstForward(host);
    const double ncclShift = firstForward(nccl) - firstForward(host);
    for (std::size_t i = 0; i < host.measured.spans.size(); ++i) {
        const auto& h = host.measured.spans[i];
        const auto& m = mixed.measured.spans[i];
        const auto& n = nccl.measured.spans[i];
        INFO(pw::planner::toString(h.kind) << " device " << h.device << " action " << h.action);
        REQUIRE((m.device == h.device && m.action == h.action && n.device == h.device && n.action == h.action));
        if (h.kind == pw::planner::ActionKind::Forward || h.kind == pw::planner::ActionKind::Backward) {
            CHECK(m.t0 - h.t0 == Approx(mixedShift).margin(1e-9));
            CHECK(n.t0 - h.t0 == Approx(ncclShift).margin(1e-9));
        }
        if (h.kind == pw::planner::ActionKind::SendActivation || h.kind == pw::planner::ActionKind::SendGradient) {
            CHECK(m.t0 - h.t0 == Approx(mixedShift - lag).margin(1e-9)); // the host's time
            CHECK(n.t0 - h.t0 == Approx(ncclShift).margin(1e-9));
        }
    }
}

TEST_CASE("import-trace: a trace of another plan is refused naming the first mismatch", "[cli][import]")
{
    TempDir dir;
    const auto plan = demoPlan();
    auto gpipe = plan;
    gpipe.schedule.kind = "gpipe";
    const auto other = writeTraces(dir.path, gpipe, 2, 0);
    try {
        pw::app::importPipeliningTraces(plan, other);
        FAIL("accepted a trace of another schedule");
    } catch (const pw::planner::InputError& e) {
        // 1F1B on rank 0 runs 0F0 0F1 0B0 (warm-up of 2: the pipeline is 2 deep); GPipe all four forwards first.
        CHECK_THAT(e.message(), Contains("rank 0, step 0, action 2: the plan runs 0B0 here, the trace 0F2"));
        CHECK(e.source() == other[0].string());
    }
    // A trace cut short, one trace missing, a file that is not a trace.
    auto traces = writeTraces(dir.path, plan, 2, 0);
    CHECK_THROWS_WITH(pw::app::importPipeliningTraces(plan, {traces[0]}), Contains("give one trace per rank, not 1"));
    {
        auto j = json::parse(std::ifstream(traces[1]));
        auto& events = j["traceEvents"];
        for (auto it = events.end(); it != events.begin();) {
            --it;
            if ((*it)["name"].get<std::string>().rfind("PP:1B", 0) == 0) {
                events.erase(it);
                break;
            }
        }
        std::ofstream(traces[1]) << j.dump();
    }
    CHECK_THROWS_WITH(pw::app::importPipeliningTraces(plan, traces), Contains("rank 1 stops within step 1"));
    std::ofstream(traces[1]) << "{\"traceEvents\": 3}";
    CHECK_THROWS_WITH(pw::app::importPipeliningTraces(plan, traces), Contains("not a PyTorch profiler (Kineto) trace"));
}

TEST_CASE("history import-trace records the run: show gives its per-kind errors and time by cause", "[cli][import]")
{
    TempDir dir;
    const auto history = (dir.path / "history.sqlite").string();
    const auto planFile = pw::cli::test::kDemo + "/gpt2-tiny-local.plan.json";
    const auto traces = writeTraces(dir.path, demoPlan(), 4, 0.25);
    std::vector<std::string> args {"history", "import-trace", planFile};
    for (const auto& t : traces)
        args.push_back(t.string());
    for (const char* a : {"--history", "--json"})
        args.push_back(a);
    args.insert(args.end() - 1, history);
    const auto imported = pw::cli::test::cli(args);
    INFO(imported.err);
    REQUIRE(imported.code == 0);
    const auto j = json::parse(imported.out);
    CHECK(j.at("steps") == 4);
    CHECK(j.at("files") == json::array({traces[0].string(), traces[1].string()}));
    const std::string id = j.at("run_id");

    const auto shown = pw::cli::test::cli({"history", "show", id, "--history", history, "--json"});
    INFO(shown.err);
    REQUIRE(shown.code == 0);
    const auto s = json::parse(shown.out);
    CHECK(s.at("status") == "succeeded");
    // The prediction is the same simulator's, of the plan as torch ran it (its tied embedding and head untied, no
    // all-reduce between their stages): every kind's error is 0 and the actions per step match.
    CHECK(j.at("untied_embeddings") == true);
    REQUIRE_FALSE(s.at("kinds").empty());
    for (const auto& k : s.at("kinds")) {
        INFO(k.dump());
        CHECK(k.at("counts_match") == true);
        CHECK(k.at("kind") != "all-reduce");
        if (k.at("kind") == "F" || k.at("kind") == "B")
            CHECK(k.at("error").get<double>() == Approx(0).margin(1e-6));
    }
    const auto text = pw::cli::test::cli({"history", "show", id, "--history", history});
    CHECK_THAT(text.out, Contains("its tied embedding and head ran untied"));
    CHECK_THAT(text.out, !Contains("did not follow the plan"));
    const auto& t = s.at("time_by_cause");
    CHECK(t.at("steps") == 4);
    REQUIRE(t.at("devices").size() == 2);
    for (const auto& d : t.at("devices"))
        CHECK(d.at("compute_s").get<double>() > 0);
    CHECK(t.at("stragglers").empty());

    // A trace of another plan records nothing.
    auto gpipe = demoPlan();
    gpipe.schedule.kind = "gpipe";
    const auto other = writeTraces(dir.path, gpipe, 2, 0);
    const auto refused = pw::cli::test::cli(
        {"history", "import-trace", planFile, other[0].string(), other[1].string(), "--history", history});
    CHECK(refused.code != 0);
    CHECK_THAT(refused.err, Contains("the plan runs 0B0 here, the trace 0F2"));
    const auto list = pw::cli::test::cli({"history", "list", "--history", history, "--json"});
    const auto runs = json::parse(list.out);
    REQUIRE(runs.size() == 1);
    // Listed with its steps, all complete, and the traces' duration (not the import's).
    CHECK(runs[0].at("steps") == 4);
    CHECK(runs[0].at("steps_planned") == 4);
    CHECK(runs[0].at("launcher") == "import");
    auto stored = pw::planner::loadPlan(planFile);
    stored.schedule.iterations = 4;
    const double simulated = pw::planner::simulate(stored).makespan_s;
    const double listed = runs[0].at("ended_unix_s").get<double>() - runs[0].at("started_unix_s").get<double>();
    CHECK(listed == Approx(simulated).epsilon(0.05)); // the traces are the simulator's run, rank 1 skewed 0.25 s
}

TEST_CASE("import-trace reads the traces real PyTorch writes", "[cli][import][torch]")
{
    // tests/oracle/pipelining_trace.py: each rank's row of the exported CSV under PyTorch's own profiler (real
    // record_function annotations, a real AdamW step), the trace as PyTorch exports it (Debian's 1.13: the legacy
    // profiler's event array; 2.x: Kineto's object).
    if (!pw::test::pythonHas("torch"))
        PW_SKIP("PyTorch is not importable by " + pw::test::python() + ": the traces made above still ran");
    pw::test::ScratchDir dir("import-torch");
    const auto script = fs::path(pw::cli::test::kData).parent_path() / "oracle/pipelining_trace.py";
    const auto csv = fs::path(pw::cli::test::kData) / "exports/gpt2-tiny-local/torchtitan/schedule.csv";
    std::vector<fs::path> traces;
    for (int rank = 0; rank < 2; ++rank) {
        traces.push_back(dir.path / ("rank" + std::to_string(rank) + ".json"));
        pw::test::runCommand(pw::test::shellQuoted(pw::test::python()) + " " + pw::test::shellQuoted(script) + " "
                + pw::test::shellQuoted(csv) + " " + std::to_string(rank) + " 3 "
                + pw::test::shellQuoted(traces.back()),
            dir.path / "err.txt");
    }
    const auto run = pw::app::importPipeliningTraces(demoPlan(), traces);
    CHECK(run.steps == 3);
    CHECK(run.matched == 3 * 32); // per step: 8 F, 8 B, 8 sends, 8 receives over both devices
    for (const auto& s : run.measured.spans) {
        CHECK(s.t1 >= s.t0);
        CHECK(s.t0 >= 0);
    }
}
