// SPDX-License-Identifier: MIT
// Runs through a real Slurm (tests/slurm/slurm_fixture.h: slurmctld, a slurmd per virtual node, munged): the tiny
// demo plan trains as a batch job with exactly the losses of a local run, its job id in the history; a plan over two
// nodes gets two nodes; scancel from outside fails the run with Slurm's reason, and Stop ends it, both leaving no
// agent; a pending job is reported and can be stopped; agents that cannot start fail the run with the job's output;
// a plan the partition cannot hold is refused before sbatch.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/history/history.h"
#include "app/run/controller.h"
#include "app/run/slurm.h"
#include "planner/errors.h"
#include "planner/io/json_file.h"
#include "tests/run/process_helpers.h"
#include "tests/skip.h"
#include "tests/slurm/slurm_fixture.h"

using namespace pw;
using Catch::Contains;
using pw::test::SlurmCluster;
using pw::test::TempDir;

namespace {

planner::Plan demoPlan()
{
    return planner::loadPlan(std::string(PW_DEMO_DIR) + "/gpt2-tiny-local.plan.json");
}

/// The demo plan's model over `nodes` nodes (n0, n1, ...) of one device each, a stage per device (1: both devices on
/// one node); with `gpus_per_node`, its devices are GPUs (the cluster file's `gpus`).
planner::Plan planOnNodes(int nodes, int gpus_per_node = 0)
{
    std::ifstream in(std::string(PW_DEMO_DIR) + "/gpt2-tiny-local.plan.json");
    nlohmann::json j = nlohmann::json::parse(in);
    auto node = j["cluster"]["nodes"][0];
    j["cluster"]["nodes"] = nlohmann::json::array();
    j["cluster"]["inter_node_bandwidth_bytes_per_s"] = 1e9;
    j["cluster"]["inter_node_latency_s"] = 1e-5;
    for (int i = 0; i < nodes; ++i) {
        node["name"] = "n" + std::to_string(i);
        node["count"] = nodes == 1 ? 2 : 1;
        if (gpus_per_node > 0) {
            node["gpus"] = nlohmann::json::array();
            for (int g = 0; g < (nodes == 1 ? 2 : 1); ++g)
                node["gpus"].push_back(g);
        }
        j["cluster"]["nodes"].push_back(node);
    }
    // Every device a stage of its own (a layer range each), so that each node holds one.
    const int layers = j["stages"].back()["last_layer"].get<int>() + 1;
    const int devices = nodes == 1 ? 2 : nodes;
    j["stages"] = nlohmann::json::array();
    for (int d = 0; d < devices; ++d)
        j["stages"].push_back(
            {{"devices", {d}}, {"first_layer", d * layers / devices}, {"last_layer", (d + 1) * layers / devices - 1}});
    return planner::planFromJson(j);
}

app::RunRequest request(const planner::Plan& plan, int steps)
{
    app::RunRequest r;
    r.plan = plan;
    r.plan_label = "slurm test plan";
    r.training.steps = steps;
    r.training.data = {agents::DataKind::Synthetic, "", 1234};
    r.training.seed = 1234;
    r.threads = 1;
    r.force = true;
    r.agent_executable = PW_AGENT_EXE;
    return r;
}

app::RunRequest slurmRequest(const planner::Plan& plan, int steps, const TempDir& runs)
{
    auto r = request(plan, steps);
    app::SlurmOptions s;
    s.controller_address = "127.0.0.1";
    s.run_root = runs.path;
    r.slurm = s;
    return r;
}

/// What `scontrol show job ID` says: its JobState and NodeList.
std::string jobField(const SlurmCluster& cluster, const std::string& job, const std::string& field)
{
    return app::parseSlurmFields(cluster.client({"/usr/bin/scontrol", "--oneliner", "show", "job", job}))[field];
}

/// Waits up to 20 s for Slurm to forget no job of ours is still live.
bool noLiveJob(const SlurmCluster& cluster)
{
    for (int i = 0; i < 200; ++i) {
        if (cluster.liveJobs().empty())
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
}

/// What a run test starts with: a Slurm cluster of its own, a directory for its runs' files, and a history.
struct SlurmRunTest
{
    SlurmCluster cluster;
    TempDir runs;
    TempDir files;
    app::HistoryStore history = app::HistoryStore::open(files.path / "history.sqlite");

    /// After the run: Slurm has no live job of ours, no process uses the runs' directory; then the cluster stops.
    void checkNothingLeft()
    {
        CHECK(noLiveJob(cluster));
        CHECK(SlurmCluster::processesUsing(runs.path.string()).empty());
        cluster.stop();
    }
};

/// A run through Slurm trains as the same plan does locally: every step's loss within 1e-6.
void checkSameLosses(const app::RunOutcome& slurm, const app::RunOutcome& local)
{
    REQUIRE(slurm.losses.size() == local.losses.size());
    for (std::size_t i = 0; i < local.losses.size(); ++i)
        CHECK(std::abs(slurm.losses[i] - local.losses[i]) <= 1e-6);
}

} // namespace

TEST_CASE("the tiny demo plan trains through Slurm with the losses of a local run and its job id stored", "[slurm]")
{
    if (const auto why = SlurmCluster::unavailable(); !why.empty())
        PW_SKIP(why);
    SlurmRunTest t;
    auto& [cluster, runs, files, history] = t;
    const auto plan = demoPlan();

    const auto local = app::RunController(request(plan, 4), history).run();
    REQUIRE(local.status == app::RunStatus::Succeeded);

    std::vector<std::string> lines;
    app::RunObserver o;
    o.log = [&](const std::string&, const std::string&, const std::string& text) { lines.push_back(text); };
    const auto slurm = app::RunController(slurmRequest(plan, 4, runs), history).run(o);
    INFO(slurm.message);
    REQUIRE(slurm.status == app::RunStatus::Succeeded);
    checkSameLosses(slurm, local);

    const auto record = history.run(slurm.run_id);
    REQUIRE(record);
    CHECK(record->launcher == "slurm");
    REQUIRE(!record->job_id.empty());
    CHECK(history.run(local.run_id)->launcher == "local");
    CHECK(jobField(cluster, record->job_id, "JobState") == "COMPLETED");
    CHECK(jobField(cluster, record->job_id, "JobName") == "pipewright-" + slurm.run_id);
    // The run directory is the user's alone, and its secret is gone with the job.
    const auto dir = runs.path / slurm.run_id;
    CHECK((std::filesystem::status(dir).permissions() & std::filesystem::perms::all)
        == std::filesystem::perms::owner_all);
    CHECK(!std::filesystem::exists(dir / "secret"));
    t.checkNothingLeft();
}

TEST_CASE("a plan over two nodes runs its agents on two Slurm nodes with the losses of a local run", "[slurm]")
{
    if (const auto why = SlurmCluster::unavailable(); !why.empty())
        PW_SKIP(why);
    SlurmRunTest t;
    auto& [cluster, runs, files, history] = t;
    const auto plan = planOnNodes(2);
    const auto local = app::RunController(request(plan, 3), history).run();
    REQUIRE(local.status == app::RunStatus::Succeeded);
    const auto slurm = app::RunController(slurmRequest(plan, 3, runs), history).run();
    INFO(slurm.message);
    REQUIRE(slurm.status == app::RunStatus::Succeeded);
    checkSameLosses(slurm, local);
    const auto job = history.run(slurm.run_id)->job_id;
    CHECK(jobField(cluster, job, "NodeList") == "pw[1-2]");
    CHECK(jobField(cluster, job, "NumNodes") == "2");
    t.checkNothingLeft();
}

TEST_CASE("scancel from outside fails the run with Slurm's reason and leaves no agent", "[slurm]")
{
    if (const auto why = SlurmCluster::unavailable(); !why.empty())
        PW_SKIP(why);
    SlurmRunTest t;
    auto& [cluster, runs, files, history] = t;
    app::RunController controller(slurmRequest(demoPlan(), 100000, runs), history);
    std::string runId;
    bool cancelled = false;
    app::RunObserver o;
    o.created = [&](const std::string& id) { runId = id; };
    o.progress = [&](const app::RunProgress& p) {
        if (p.step >= 2 && !cancelled) {
            cancelled = true;
            CHECK(cluster.client({"/usr/bin/scancel", "--name=pipewright-" + runId}).empty());
        }
    };
    const auto out = controller.run(o);
    REQUIRE(cancelled);
    CHECK(out.status == app::RunStatus::Failed);
    const auto job = history.run(out.run_id)->job_id;
    CHECK_THAT(out.message, Contains("the Slurm job " + job + " ended: CANCELLED"));
    CHECK(history.run(out.run_id)->status_message == out.message);
    t.checkNothingLeft();
}

TEST_CASE("stopping a Slurm run ends its job and leaves no agent", "[slurm]")
{
    if (const auto why = SlurmCluster::unavailable(); !why.empty())
        PW_SKIP(why);
    SlurmRunTest t;
    auto& [cluster, runs, files, history] = t;
    app::RunController controller(slurmRequest(demoPlan(), 100000, runs), history);
    app::RunObserver o;
    o.progress = [&](const app::RunProgress& p) {
        if (p.step >= 2)
            controller.stop();
    };
    const auto out = controller.run(o);
    CHECK(out.status == app::RunStatus::Stopped);
    const auto job = history.run(out.run_id)->job_id;
    REQUIRE(!job.empty());
    CHECK(noLiveJob(cluster));
    const auto state = jobField(cluster, job, "JobState");
    INFO(state);
    CHECK(state == "CANCELLED");
    CHECK(SlurmCluster::processesUsing(runs.path.string()).empty());
    cluster.stop();
}

TEST_CASE("a pending Slurm job is reported with its reason and can be stopped", "[slurm]")
{
    if (const auto why = SlurmCluster::unavailable(); !why.empty())
        PW_SKIP(why);
    SlurmRunTest t;
    auto& [cluster, runs, files, history] = t;
    auto req = slurmRequest(demoPlan(), 5, runs);
    req.slurm->sbatch_args = {"--begin=now+1hour"}; // held back: pending with Reason=BeginTime
    app::RunController controller(req, history);
    std::atomic<bool> pending {false};
    app::RunObserver o;
    o.log = [&](const std::string&, const std::string&, const std::string& text) {
        if (text.find("is pending (BeginTime)") != std::string::npos)
            pending = true;
    };
    std::thread stopper([&] {
        for (int i = 0; i < 300 && !pending; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        controller.stop();
    });
    const auto out = controller.run(o);
    stopper.join();
    CHECK(pending);
    CHECK(out.status == app::RunStatus::Stopped);
    const auto job = history.run(out.run_id)->job_id;
    REQUIRE(!job.empty());
    CHECK(noLiveJob(cluster));
    CHECK(jobField(cluster, job, "JobState") == "CANCELLED");
    cluster.stop();
}

TEST_CASE("a plan the Slurm partition cannot hold is refused before anything is submitted", "[slurm]")
{
    if (const auto why = SlurmCluster::unavailable(); !why.empty())
        PW_SKIP(why);
    SlurmCluster cluster; // two nodes of two CPUs, no GPU
    TempDir runs;
    // Three nodes wanted, two there.
    try {
        app::checkRun(slurmRequest(planOnNodes(3), 2, runs));
        FAIL("a plan over three nodes was accepted on a partition of two");
    } catch (const planner::InputError& e) {
        CHECK_THAT(e.what(), Contains("the Slurm partition 'debug' cannot hold this plan"));
        CHECK_THAT(e.what(), Contains("needs 3 nodes"));
        CHECK_THAT(e.what(), Contains("has 2 usable nodes"));
    }
    // GPUs wanted, none there.
    try {
        app::checkRun(slurmRequest(planOnNodes(2, 1), 2, runs));
        FAIL("a plan on GPUs was accepted on a partition without any");
    } catch (const planner::InputError& e) {
        CHECK_THAT(e.what(), Contains("1 GPU"));
    }
    // A partition that does not exist.
    auto other = slurmRequest(demoPlan(), 2, runs);
    other.slurm->partition = "gpu";
    CHECK_THROWS_WITH(app::checkRun(other), Contains("the Slurm partition 'gpu' does not exist (partitions: debug)"));
    // Nothing was submitted, and the fitting plan passes the same check.
    CHECK(cluster.liveJobs().empty());
    CHECK(cluster.client({"/usr/bin/scontrol", "--oneliner", "show", "job"}).find("JobId=") == std::string::npos);
    CHECK_NOTHROW(app::checkRun(slurmRequest(demoPlan(), 2, runs)));
    cluster.stop();
}

TEST_CASE("the CLI's preflight --slurm and run --slurm refuse a plan the partition cannot hold", "[slurm]")
{
    if (const auto why = SlurmCluster::unavailable(); !why.empty())
        PW_SKIP(why);
    SlurmCluster cluster;
    TempDir files;
    const auto big = files.path / "three-nodes.plan.json";
    std::ofstream(big) << planner::toJson(planOnNodes(3)).dump();
    const auto demo = std::string(PW_DEMO_DIR) + "/gpt2-tiny-local.plan.json";
    const auto out = files.path / "out.txt";
    CHECK(pw::test::runProgram({PW_CLI_EXE, "preflight", demo, "--slurm"}, out) == 0);
    CHECK_THAT(pw::test::slurpFile(out), Contains("partition debug: up, 2 usable nodes"));
    CHECK(pw::test::runProgram({PW_CLI_EXE, "preflight", big.string(), "--slurm", "--partition", "debug"}, out) == 1);
    CHECK_THAT(pw::test::slurpFile(out), Contains("needs 3 nodes"));
    const auto historyFile = files.path / "history.sqlite";
    CHECK(pw::test::runProgram({PW_CLI_EXE, "run", big.string(), "--slurm", "--controller-address", "127.0.0.1",
                                   "--slurm-dir", files.path.string(), "--history", historyFile.string()},
              out)
        == 1);
    CHECK_THAT(pw::test::slurpFile(out), Contains("cannot hold this plan"));
    CHECK(!std::filesystem::exists(historyFile)); // refused before the run was recorded
    CHECK(cluster.liveJobs().empty());
    cluster.stop();
}

TEST_CASE("the CLI trains through Slurm and the history shows the job", "[slurm]")
{
    if (const auto why = SlurmCluster::unavailable(); !why.empty())
        PW_SKIP(why);
    SlurmCluster cluster;
    TempDir files;
    const auto demo = std::string(PW_DEMO_DIR) + "/gpt2-tiny-local.plan.json";
    const auto historyFile = files.path / "history.sqlite";
    const auto out = files.path / "out.txt";
    REQUIRE(
        pw::test::runProgram({PW_CLI_EXE, "run", demo, "--slurm", "--partition", "debug", "--time", "10",
                                 "--sbatch-arg=--comment=pipewright-test", "--controller-address", "127.0.0.1",
                                 "--slurm-dir", files.path.string(), "--steps", "2", "--history", historyFile.string()},
            out)
        == 0);
    CHECK_THAT(pw::test::slurpFile(out), Contains("submitted Slurm job"));
    REQUIRE(
        pw::test::runProgram({PW_CLI_EXE, "history", "list", "--json", "--history", historyFile.string()}, out) == 0);
    const auto runs = nlohmann::json::parse(pw::test::slurpFile(out));
    REQUIRE(runs.size() == 1);
    CHECK(runs[0]["launcher"] == "slurm");
    const std::string job = runs[0]["job_id"];
    CHECK(jobField(cluster, job, "Comment") == "pipewright-test");
    CHECK(jobField(cluster, job, "TimeLimit") == "00:10:00");
    REQUIRE(
        pw::test::runProgram({PW_CLI_EXE, "history", "show", "latest", "--history", historyFile.string()}, out) == 0);
    CHECK_THAT(pw::test::slurpFile(out), Contains("launched by slurm as job " + job));
    CHECK(noLiveJob(cluster));
    cluster.stop();
}

TEST_CASE("a job whose agents cannot start fails the run with the job's state and output", "[slurm]")
{
    if (const auto why = SlurmCluster::unavailable(); !why.empty())
        PW_SKIP(why);
    SlurmRunTest t;
    auto& [cluster, runs, files, history] = t;
    auto req = slurmRequest(demoPlan(), 2, runs);
    req.agent_executable = files.path / "no-such-agent"; // not on the nodes' (shared) filesystem
    const auto out = app::RunController(req, history).run();
    CHECK(out.status == app::RunStatus::Failed);
    const auto job = history.run(out.run_id)->job_id;
    REQUIRE(!job.empty());
    CHECK_THAT(out.message, Contains("the Slurm job " + job + " ended before its agents connected: FAILED"));
    CHECK_THAT(out.message, Contains("no-such-agent"));
    t.checkNothingLeft();
}
