// SPDX-License-Identifier: MIT
// The Slurm launcher's parts that need no Slurm (app/run/slurm.h): what `scontrol show node` says read as nodes, a
// partition checked against a plan's nodes (refusals that say what is missing), the agents' connect proof
// (agents/protocol/connect_auth.h), and the history's launcher and job id (schema 6, migrated from 5).
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include <sqlite3.h>
#include <unistd.h>

#include "agents/protocol/connect_auth.h"
#include "app/history/history.h"
#include "app/history/history_file.h"
#include "app/history/schema.h"
#include "app/run/slurm.h"
#include "planner/io/json_file.h"

using namespace pw;
using namespace pw::app;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

planner::Plan demoPlan()
{
    return planner::loadPlan(std::string(PW_DEMO_DIR) + "/gpt2-tiny-local.plan.json");
}

/// The demo plan with its devices on GPUs 0 and 1 of its node.
planner::Plan slurmFitGpuPlan()
{
    auto plan = demoPlan();
    planner::Cluster cluster = *plan.cluster;
    cluster.nodes[0].gpus = {0, 1};
    plan.cluster = cluster;
    return plan;
}

SlurmNode node(const std::string& name, int cpus, int gpus, const std::string& state = "IDLE")
{
    return {name, cpus, gpus, state, {"debug"}};
}

} // namespace

TEST_CASE("scontrol's node lines are read as nodes with their CPUs GPUs state and partitions", "[slurm]")
{
    const std::string out
        = "NodeName=pw1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.22 "
          "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 NodeHostName=vm "
          "Version=22.05.8 OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01) RealMemory=1 "
          "State=IDLE ThreadsPerCore=1 Partitions=debug Reason=none\n"
          "NodeName=g1 CPUTot=64 CPUEfctv=62 Gres=gpu:a100:4(S:0-1),gpu:v100:2 State=MIXED+DRAIN "
          "Partitions=gpu,all\n"
          "NodeName=g2 CPUTot=8 Gres=gpu:2 State=DOWN* Partitions=gpu\n";
    const auto nodes = parseSlurmNodes(out);
    REQUIRE(nodes.size() == 3);
    CHECK(nodes[0] == SlurmNode {"pw1", 2, 0, "IDLE", {"debug"}});
    CHECK(nodes[0].usable());
    CHECK(nodes[1] == SlurmNode {"g1", 62, 6, "MIXED+DRAIN", {"gpu", "all"}});
    CHECK(!nodes[1].usable());
    CHECK(nodes[2].gpus == 2);
    CHECK(!nodes[2].usable());
    CHECK(parseSlurmFields("JobId=7 JobName=x JobState=CANCELLED Reason=None Dependency=(null)")["JobState"]
        == "CANCELLED");
}

TEST_CASE("a partition is checked against the plan's nodes tasks and GPUs", "[slurm]")
{
    const auto plan = demoPlan(); // one node, two CPU devices
    CHECK(slurmNeeds(plan) == std::vector<SlurmNeed> {{"localhost", 2, 0, 2}});
    CHECK(slurmNeeds(plan, 3) == std::vector<SlurmNeed> {{"localhost", 2, 0, 6}});
    CHECK_THAT(fitSlurmNodes(plan, "debug", true, {node("pw1", 4, 0)}, 3).refusal,
        Contains("no node left for plan node localhost: 2 tasks, 6 CPUs"));
    auto fit = fitSlurmNodes(plan, "debug", true, {node("pw1", 2, 0), node("pw2", 2, 0)});
    CHECK(fit.refusal.empty());
    CHECK_THAT(fit.lines.back(), Contains("plan node localhost: 2 tasks fits pw1: 2 CPUs"));

    fit = fitSlurmNodes(plan, "debug", true, {node("pw1", 1, 0), node("pw2", 1, 0, "DOWN")});
    CHECK_THAT(fit.refusal,
        Contains("the Slurm partition 'debug' cannot hold this plan: no node left for plan node localhost: 2 tasks"));
    fit = fitSlurmNodes(plan, "debug", false, {node("pw1", 2, 0)});
    CHECK_THAT(fit.refusal, Contains("the partition is not up"));
    // Nodes of other partitions do not count.
    auto elsewhere = node("pw3", 8, 0);
    elsewhere.partitions = {"other"};
    fit = fitSlurmNodes(plan, "debug", true, {elsewhere});
    CHECK_THAT(fit.refusal, Contains("it needs 1 node (localhost: 2 tasks) and the partition has 0 usable nodes"));

    const auto gpus = slurmFitGpuPlan();
    CHECK(slurmNeeds(gpus) == std::vector<SlurmNeed> {{"localhost", 2, 2, 2}});
    fit = fitSlurmNodes(gpus, "debug", true, {node("c1", 64, 0), node("g1", 8, 1)});
    CHECK_THAT(fit.refusal, Contains("no node left for plan node localhost: 2 tasks, 2 GPUs"));
    CHECK_THAT(fit.refusal, Contains("g1: 8 CPUs, 1 GPU"));
    // The smallest node that holds it is taken.
    fit = fitSlurmNodes(gpus, "debug", true, {node("g8", 64, 8), node("g2", 16, 2)});
    CHECK(fit.refusal.empty());
    CHECK_THAT(fit.lines.back(), Contains("fits g2: 16 CPUs, 2 GPUs"));
}

TEST_CASE("an agent's connect answer proves the secret the nonce and its task", "[slurm]")
{
    const std::vector<std::uint8_t> secret(32, 7), other(32, 8);
    const std::string nonce(agents::kConnectNonceBytes, 'n');
    const auto answer = agents::connectAnswer(secret, nonce, 3);
    CHECK(answer.size() == agents::kConnectAnswerBytes);
    CHECK(agents::checkConnectAnswer(secret, nonce, answer) == 3);
    CHECK(agents::checkConnectAnswer(other, nonce, answer) == -1); // another run's secret
    CHECK(agents::checkConnectAnswer(secret, std::string(agents::kConnectNonceBytes, 'm'), answer) == -1); // replay
    auto forged = answer;
    forged[7] = 4; // the task changed: the MAC no longer matches
    CHECK(agents::checkConnectAnswer(secret, nonce, forged) == -1);
    CHECK(agents::checkConnectAnswer(secret, nonce, answer.substr(1)) == -1);
}

TEST_CASE("a schema 5 history migrates to launchers and job ids", "[slurm][history]")
{
    const fs::path file = fs::temp_directory_path() / ("pw-slurm-" + std::to_string(::getpid()) + ".sqlite");
    {
        sqlite3* db = nullptr;
        REQUIRE(sqlite3_open(file.c_str(), &db) == SQLITE_OK);
        const auto migrations = historyMigrations();
        REQUIRE(migrations.size() >= 6);
        for (std::size_t i = 0; i < 5; ++i)
            REQUIRE(sqlite3_exec(db, std::string(migrations[i]).c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
        const std::string rows = "PRAGMA user_version=5; PRAGMA application_id=" + std::to_string(kApplicationId)
            + "; INSERT INTO runs (id, status, started_unix_s, run_key, hosts_json) VALUES ('ssh', 'failed', 1, 1, "
              "'[{\"device\":0,\"host\":\"a\",\"launcher\":\"ssh\"}]');"
              " INSERT INTO runs (id, status, started_unix_s, run_key, hosts_json) VALUES ('bare', 'failed', 2, 2, "
              "'');";
        REQUIRE(sqlite3_exec(db, rows.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
        sqlite3_close(db);
    }
    {
        auto store = HistoryStore::open(file);
        REQUIRE(store.run("ssh"));
        CHECK(store.run("ssh")->launcher == "ssh");
        CHECK(store.run("ssh")->job_id.empty());
        CHECK(store.run("bare")->launcher.empty());
        NewRun nr;
        nr.plan_json = "{}";
        nr.launcher = "slurm";
        const auto id = store.createRun(nr);
        CHECK(store.run(id)->launcher == "slurm");
        store.setJobId(id, "4242");
        CHECK(store.run(id)->job_id == "4242");
        CHECK(store.listRuns().front().job_id == "4242");
    }
    std::error_code ec;
    for (const char* suffix : {"", "-wal", "-shm"})
        fs::remove(file.string() + suffix, ec);
}
