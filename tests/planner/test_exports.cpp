// SPDX-License-Identifier: MIT
// The exports to torchtitan, Megatron-LM and DeepSpeed (planner/export): golden files of the demo plans, of an
// interleaved plan and of the 64-stage GPT-3 plan; each file checked against its format's grammar (the CSV by a dry
// run of its dependencies, the layout string by Megatron's rules, TOML, JSON and Python by their parsers); the
// torchtitan CSV by PyTorch's own loader where torch.distributed.pipelining is importable; and the refusals.
// PW_UPDATE_GOLDEN=1 rewrites the golden files (tests/data/exports/CASE/FORMAT/...).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include "fixtures.h"
#include "planner/errors.h"
#include "planner/export/export.h"
#include "planner/io/json_file.h"
#include "planner/partition/partitioner.h"
#include "planner/plan.h"
#include "planner/schedule/generator.h"
#include "tests/skip.h"

using namespace pw::planner;
namespace fs = std::filesystem;

namespace {

const fs::path kGolden = fs::path(PW_TEST_DATA_DIR) / "exports";

Plan exportsDemoPlan(const std::string& file)
{
    return loadPlan(std::string(PW_DEMO_DIR) + "/" + file);
}

/// The 64-stage GPT-3 175B plan of the demo project, with 128 microbatches per step (the project's 10,000 would
/// make a CSV of 1.3 million actions).
Plan gpt3Plan()
{
    const auto project = readJsonFile(std::string(PW_DEMO_DIR) + "/gpt3-175b-64xh100.pwproj");
    Plan plan = planFromJson(project.at("plan"));
    plan.schedule.microbatches = 128;
    plan.validate();
    return plan;
}

/// The tiny demo as Megatron's interleaved 1F1B: 4 virtual stages on its 2 devices, uneven (embedding and 2
/// transformer layers, 1, 1, the head alone).
Plan interleavedPlan()
{
    Plan plan = exportsDemoPlan("gpt2-tiny-local.plan.json");
    plan.stages = {{0, 2, {0}}, {3, 3, {1}}, {4, 4, {0}}, {5, 5, {1}}};
    plan.schedule.kind = "interleaved";
    plan.schedule.chunks = 2;
    plan.validate();
    return plan;
}

using pw::test::readFile;

void writeFile(const fs::path& path, const std::string& text)
{
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << text;
}

/// Runs a shell command; its exit status and output.
std::pair<int, std::string> shell(const std::string& command)
{
    std::string out;
    std::FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
    char buffer[4096];
    for (std::size_t n; pipe && (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
        out.append(buffer, n);
    const int status = pipe ? ::pclose(pipe) : -1;
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

const ExportedFile* fileNamed(const PlanExport& e, const std::string& name)
{
    for (const auto& f : e.files)
        if (f.name == name)
            return &f;
    return nullptr;
}

/// @brief One compute action of the CSV.
struct CsvAction
{
    int stage = 0;
    char kind = 'F';
    int microbatch = 0;
};

/// Parses the compute_only CSV by its grammar ({stage}{F|I|B|W}{microbatch}, comma-separated, a row per rank; an
/// overlapped pair ({action};{action})OVERLAP_F_B, a forward and a backward, as its two actions in order).
std::vector<std::vector<CsvAction>> parseCsv(const std::string& text)
{
    static const std::regex cell(R"(^(\d+)([FIBW])(\d+)$)");
    static const std::regex pair(R"(^\((\d+)F(\d+);(\d+)([BI])(\d+)\)OVERLAP_F_B$)");
    std::vector<std::vector<CsvAction>> rows;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        auto& row = rows.emplace_back();
        std::istringstream cells(line);
        for (std::string c; std::getline(cells, c, ',');) {
            std::smatch m;
            INFO("cell '" << c << "' of row " << rows.size() - 1);
            if (std::regex_match(c, m, pair)) {
                CHECK(m[1] != m[3]); // two stages: one chunk's forward with the other's backward
                row.push_back({std::stoi(m[1]), 'F', std::stoi(m[2])});
                row.push_back({std::stoi(m[3]), m[4].str()[0], std::stoi(m[5])});
                continue;
            }
            REQUIRE(std::regex_match(c, m, cell));
            row.push_back({std::stoi(m[1]), m[2].str()[0], std::stoi(m[3])});
        }
    }
    return rows;
}

/// Checks a CSV schedule as torch.distributed.pipelining's validator and dry run do: each stage on one rank, every
/// stage's F and either B or I and W of every microbatch once, and the ranks' lists run to the end when F(s, m) waits
/// for F(s-1, m), B or I(s, m) for F(s, m) and the next stage's B or I, and W(s, m) for I(s, m) (a deadlock leaves
/// some unfinished).
void checkCsvRuns(const std::vector<std::vector<CsvAction>>& rows, int stages, int microbatches)
{
    std::map<int, int> rankOf;
    std::set<std::tuple<int, char, int>> seen;
    for (std::size_t r = 0; r < rows.size(); ++r)
        for (const auto& a : rows[r]) {
            CHECK(a.stage < stages);
            CHECK(a.microbatch < microbatches);
            const auto [it, fresh] = rankOf.emplace(a.stage, static_cast<int>(r));
            CHECK(it->second == static_cast<int>(r));
            CHECK(seen.insert({a.stage, a.kind, a.microbatch}).second);
        }
    CHECK(static_cast<int>(rankOf.size()) == stages);
    for (int s = 0; s < stages; ++s)
        for (int m = 0; m < microbatches; ++m) {
            INFO("stage " << s << " microbatch " << m);
            CHECK(seen.count({s, 'F', m}) == 1);
            const bool fused = seen.count({s, 'B', m}) == 1;
            CHECK(fused != (seen.count({s, 'I', m}) == 1));
            CHECK(seen.count({s, 'W', m}) == (fused ? 0u : 1u));
        }
    std::set<std::tuple<int, char, int>> done;
    const auto backwardDone = [&](int s, int m) { return done.count({s, 'B', m}) || done.count({s, 'I', m}); };
    std::vector<std::size_t> next(rows.size(), 0);
    for (bool progress = true; progress;) {
        progress = false;
        for (std::size_t r = 0; r < rows.size(); ++r) {
            if (next[r] == rows[r].size())
                continue;
            const CsvAction& a = rows[r][next[r]];
            bool ready = false;
            if (a.kind == 'F')
                ready = a.stage == 0 || done.count({a.stage - 1, 'F', a.microbatch});
            else if (a.kind == 'W')
                ready = done.count({a.stage, 'I', a.microbatch}) > 0;
            else
                ready = done.count({a.stage, 'F', a.microbatch})
                    && (a.stage == stages - 1 || backwardDone(a.stage + 1, a.microbatch));
            if (ready) {
                done.insert({a.stage, a.kind, a.microbatch});
                ++next[r];
                progress = true;
            }
        }
    }
    for (std::size_t r = 0; r < rows.size(); ++r) {
        INFO("rank " << r << " stops at action " << next[r] << " of " << rows[r].size());
        CHECK(next[r] == rows[r].size());
    }
}

/// Megatron's layout grammar: '|' between virtual stages, x*N repeats x, E embedding, t transformer layer, L loss.
/// The layer count of each virtual stage, the embedding first and the loss last checked as Megatron checks them.
std::vector<int> megatronLayout(std::string layout, int pipeline, int layers)
{
    static const std::regex repeat(R"((.)\*(\d+))");
    std::smatch m;
    while (std::regex_search(layout, m, repeat))
        layout = m.prefix().str() + std::string(static_cast<std::size_t>(std::stoi(m[2])), m[1].str()[0])
            + m.suffix().str();
    std::vector<int> counts;
    std::string flat;
    std::istringstream stages(layout);
    for (std::string s; std::getline(stages, s, '|');) {
        CHECK(s.find_first_not_of("EtL") == std::string::npos);
        counts.push_back(static_cast<int>(s.size()));
        flat += s;
    }
    CHECK(counts.size() % static_cast<std::size_t>(pipeline) == 0);
    CHECK(flat.front() == 'E');
    CHECK(flat.back() == 'L');
    CHECK(std::count(flat.begin(), flat.end(), 'E') == 1);
    CHECK(std::count(flat.begin(), flat.end(), 'L') == 1);
    CHECK(std::count(flat.begin(), flat.end(), 't') == layers);
    return counts;
}

/// The value of a flag in Megatron's argument array ("" when absent).
std::string megatronArg(const std::string& text, const std::string& flag)
{
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        std::istringstream words(line);
        std::string first, value;
        words >> first;
        if (first == flag) {
            std::getline(words >> std::ws, value);
            return value.empty() ? "(set)" : value;
        }
    }
    return "";
}

/// Compares an export with its golden files (or writes them under PW_UPDATE_GOLDEN=1).
void checkGolden(const std::string& name, const std::string& format, const PlanExport& e)
{
    const fs::path dir = kGolden / name / format;
    if (std::getenv("PW_UPDATE_GOLDEN")) {
        fs::remove_all(dir);
        for (const auto& f : e.files)
            writeFile(dir / f.name, f.text);
    }
    std::set<std::string> golden;
    if (fs::is_directory(dir))
        for (const auto& entry : fs::directory_iterator(dir))
            golden.insert(entry.path().filename().string());
    std::set<std::string> made;
    for (const auto& f : e.files) {
        made.insert(f.name);
        INFO(dir / f.name);
        CHECK(readFile(dir / f.name) == f.text);
    }
    CHECK(made == golden);
}

/// @brief A plan the golden files cover.
struct Case
{
    std::string name;
    Plan plan;
};

/// The tiny demo under the zero-bubble schedules (input and weight gradients apart): one stage per device for
/// zb-h1 and zb-h2, two chunks in a V for zbv, dualpipev, v-half and v-min. torchtitan's CSV carries them; Megatron and
/// DeepSpeed refuse them.
std::vector<Case> zeroBubbleCases()
{
    std::vector<Case> out;
    for (const std::string kind : {"zb-h1", "zb-h2"}) {
        Plan plan = exportsDemoPlan("gpt2-tiny-local.plan.json");
        plan.schedule.kind = kind;
        plan.validate();
        out.push_back({"gpt2-tiny-" + kind, plan});
    }
    Plan v = exportsDemoPlan("gpt2-tiny-local.plan.json");
    v.stages = {{0, 1, {0}}, {2, 2, {1}}, {3, 3, {1}}, {4, 5, {0}}};
    v.schedule.kind = "zbv";
    v.schedule.chunks = 2;
    v.validate();
    out.push_back({"gpt2-tiny-zbv", v});
    v.schedule.kind = "dualpipev"; // the same V, its 4 microbatches the 2p DualPipeV needs
    v.validate();
    out.push_back({"gpt2-tiny-dualpipev", v});
    for (const std::string kind : {"v-half", "v-min"}) { // the same V: torch runs them from the CSV alone
        v.schedule.kind = kind;
        v.validate();
        out.push_back({"gpt2-tiny-" + kind, v});
    }
    return out;
}

/// The demo's GPT on its 8 H100s as `plan --algorithm uniform --stages 4 --microbatches 8` makes it: 4 stages, each
/// on 2 devices (data parallel 2), 8 microbatches of 4 samples per step dealt round-robin (replica 0 runs 0, 2, 4,
/// 6): 32 samples per step, 4 microbatches per replica.
Plan exportsReplicatedPlan()
{
    PartitionOptions o;
    o.stages = 4;
    o.schedule.microbatches = 8;
    auto r = findPartitioner("uniform")->partition({loadModel(std::string(PW_DEMO_DIR) + "/gpt-demo.json"),
                                                       loadCluster(std::string(PW_DEMO_DIR) + "/dgx-h100.json"), o},
        {}, {});
    REQUIRE(r.ok());
    REQUIRE(r.plan->dataReplicas(0) == 2);
    return *r.plan;
}

/// Samples one step of the plan trains, and microbatches per data-parallel replica.
long long planBatch(const Plan& plan)
{
    return static_cast<long long>(plan.schedule.microbatches)
        * (plan.schedule.microbatch_size > 0 ? plan.schedule.microbatch_size : plan.model->microbatch_size);
}
int replicaMicrobatches(const Plan& plan)
{
    return plan.schedule.microbatches / plan.dataReplicas(0);
}

std::vector<Case> cases()
{
    return {{"gpt2-tiny-local", exportsDemoPlan("gpt2-tiny-local.plan.json")},
        {"gpt2-124m-h100", exportsDemoPlan("gpt2-124m-h100.plan.json")}, {"gpt2-tiny-interleaved", interleavedPlan()},
        {"gpt3-175b-64xh100", gpt3Plan()}, {"gpt-demo-replicated", exportsReplicatedPlan()}};
}

} // namespace

TEST_CASE("the exporters are listed once by name", "[exports]")
{
    std::set<std::string> names;
    for (const auto* e : planExporters()) {
        CHECK(names.insert(std::string(e->name())).second);
        CHECK(findPlanExporter(e->name()) == e);
        CHECK_FALSE(e->description().empty());
    }
    CHECK(names == std::set<std::string> {"torchtitan", "megatron", "deepspeed"});
    CHECK(findPlanExporter("gpipe") == nullptr);
}

TEST_CASE("torchtitan exports match their golden files and the CSV runs as PyTorch would run it", "[exports]")
{
    const PlanExporter& exporter = *findPlanExporter("torchtitan");
    auto all = cases();
    for (auto& c : zeroBubbleCases())
        all.push_back(std::move(c));
    for (const auto& c : all) {
        INFO(c.name);
        const PlanExport e = exporter.write(c.plan);
        checkGolden(c.name, "torchtitan", e);
        const auto* csv = fileNamed(e, "schedule.csv");
        REQUIRE(csv);
        const int depth = c.plan.pipelineDepth();
        const auto rows = parseCsv(csv->text);
        REQUIRE(static_cast<int>(rows.size()) == depth);
        checkCsvRuns(rows, c.plan.stageCount(), replicaMicrobatches(c.plan)); // each rank numbers its own from 0
        const auto* toml = fileNamed(e, "torchtitan.toml");
        REQUIRE(toml);
        CHECK_THAT(toml->text, Catch::Contains("pipeline_parallel_degree = " + std::to_string(depth) + "\n"));
        CHECK_THAT(toml->text, Catch::Contains("pipeline_parallel_schedule_csv = \"schedule.csv\""));
    }
}

TEST_CASE("torchtitan trains an embedding and head tied across stages as two copies, and says so", "[exports]")
{
    // torchtitan refuses weight tying with pipeline parallelism, and torch.distributed.pipelining's stages share no
    // parameters: the plan as it runs there has no all-reduce between the embedding's and the head's stages.
    const PlanExporter& torchtitan = *findPlanExporter("torchtitan");
    const Plan tied = exportsDemoPlan("gpt2-tiny-local.plan.json");
    REQUIRE(tied.model->tiedWeightBytes() > 0);
    REQUIRE_FALSE(tied.tiedWeightGroups(0).empty());
    const Plan ran = torchtitan.runsAs(tied);
    CHECK(ran != tied);
    CHECK_FALSE(ran.model->architecture->tied_embeddings);
    CHECK(ran.model->tiedWeightBytes() == 0);
    CHECK(ran.tiedWeightGroups(0).empty());
    // Each stage held its copy already: the layers, the stages and the schedule options are the plan's.
    CHECK(ran.model->layers == tied.model->layers);
    CHECK(ran.stages == tied.stages);
    CHECK(ran.schedule == tied.schedule);
    const auto allReduces = [](const Plan& p) {
        long n = 0;
        for (const auto& list : generateSchedule(p).devices)
            n += std::count_if(
                list.begin(), list.end(), [](const Action& a) { return a.kind == ActionKind::AllReduce; });
        return n;
    };
    CHECK(allReduces(tied) == 2); // one per device and step
    CHECK(allReduces(ran) == 0);
    const auto notes = torchtitan.write(tied).notes;
    CHECK(std::count_if(notes.begin(), notes.end(), [](const std::string& n) {
        return n.find("refuses weight tying with pipeline parallelism") != std::string::npos
            && n.find("stage 0 and stage 1") != std::string::npos;
    }) == 1);
    // Megatron and DeepSpeed tie across stages (Megatron's embedding group, DeepSpeed's TiedLayerSpec).
    CHECK(findPlanExporter("megatron")->runsAs(tied) == tied);
    CHECK(findPlanExporter("deepspeed")->runsAs(tied) == tied);
    // One stage holds both, or nothing is tied: the plan runs as it is, and no note.
    for (const Plan& same : {exportsDemoPlan("gpt2-124m-h100.plan.json"), torchtitan.runsAs(ran)}) {
        CHECK(torchtitan.runsAs(same) == same);
        for (const auto& n : torchtitan.write(same).notes)
            CHECK_THAT(n, !Catch::Contains("weight tying"));
    }
}

TEST_CASE("torchtitan TOML parses with Python's tomllib into the plan's stages and modules", "[exports]")
{
    if (shell("python3 -c 'import tomllib'").first != 0)
        PW_SKIP("python3 with tomllib (3.11 or later) is not on this machine");
    const fs::path dir = fs::temp_directory_path() / ("pw-exports-toml-" + std::to_string(::getpid()));
    for (const auto& c : cases()) {
        INFO(c.name);
        const PlanExport e = findPlanExporter("torchtitan")->write(c.plan);
        writeFile(dir / "torchtitan.toml", fileNamed(e, "torchtitan.toml")->text);
        // Every module once, in order, split as the plan's stages.
        const auto [status, out]
            = shell("python3 -c 'import tomllib, sys; d = tomllib.load(open(sys.argv[1], \"rb\")); "
                    "p = d[\"parallelism\"]; m = p[\"module_fqns_per_model_part\"]; "
                    "print(p[\"pipeline_parallel_degree\"], len(m), sum(len(x) for x in m), "
                    "d[\"training\"][\"local_batch_size\"])' "
                + (dir / "torchtitan.toml").string());
        INFO(out);
        REQUIRE(status == 0);
        const int layers = c.plan.model->layerCount();
        const int modules = layers + 1; // the head is norm and output
        const long long batch = planBatch(c.plan) / c.plan.dataReplicas(0); // local: one data-parallel replica's
        CHECK(out
            == std::to_string(c.plan.pipelineDepth()) + " " + std::to_string(c.plan.stageCount()) + " "
                + std::to_string(modules) + " " + std::to_string(batch) + "\n");
    }
    fs::remove_all(dir);
}

TEST_CASE("torchtitan CSV loads with PyTorch's own parser validator and dry run", "[exports][torch]")
{
    const fs::path script = fs::path(PW_SOURCE_DIR) / "tests/oracle/check_pipelining_csv.py";
    const fs::path dir = fs::temp_directory_path() / ("pw-exports-csv-" + std::to_string(::getpid()));
    bool ran = false;
    std::string why;
    auto all = cases();
    for (auto& c : zeroBubbleCases())
        all.push_back(std::move(c));
    for (const auto& c : all) {
        INFO(c.name);
        const PlanExport e = findPlanExporter("torchtitan")->write(c.plan);
        writeFile(dir / "schedule.csv", fileNamed(e, "schedule.csv")->text);
        const auto [status, out] = shell("python3 " + script.string() + " " + (dir / "schedule.csv").string() + " "
            + std::to_string(c.plan.pipelineDepth()) + " " + std::to_string(c.plan.stageCount()) + " "
            + std::to_string(replicaMicrobatches(c.plan))); // the CSV is one replica's ranks, numbered from 0
        INFO(out);
        if (status == 3) { // no torch.distributed.pipelining here
            why = out;
            break;
        }
        CHECK(status == 0);
        // Its verdict is the last line (PyTorch may warn before it).
        const std::string last = out.substr(out.rfind('\n', out.size() - 2) + 1);
        CHECK_THAT(last, Catch::StartsWith("ok: ") && Catch::Contains(" compute actions"));
        CHECK_THAT(last, !Catch::StartsWith("ok: 0 "));
        ran = true;
    }
    fs::remove_all(dir);
    if (!ran)
        PW_SKIP("PyTorch's pipelining is not importable (" + why.substr(0, why.find('\n'))
            + "): the grammar and dry-run checks above still ran; PyTorch 2.4 or later runs this one");
}

TEST_CASE("Megatron arguments match their golden files and the layout follows Megatron's grammar", "[exports]")
{
    const PlanExporter& exporter = *findPlanExporter("megatron");
    for (const auto& c : cases()) {
        INFO(c.name);
        const PlanExport e = exporter.write(c.plan);
        checkGolden(c.name, "megatron", e);
        const std::string& text = fileNamed(e, "megatron_args.sh")->text;
        const int depth = c.plan.pipelineDepth();
        const int blocks = c.plan.model->layerCount() - 2;
        CHECK(megatronArg(text, "--pipeline-model-parallel-size") == std::to_string(depth));
        CHECK(megatronArg(text, "--num-layers") == std::to_string(blocks));
        CHECK(megatronArg(text, "--global-batch-size") == std::to_string(planBatch(c.plan)));
        std::string layout = megatronArg(text, "--pipeline-model-parallel-layout");
        if (!layout.empty()) {
            REQUIRE(layout.size() > 2);
            const auto counts = megatronLayout(layout.substr(1, layout.size() - 2), depth, blocks);
            REQUIRE(static_cast<int>(counts.size()) == c.plan.stageCount());
            for (int s = 0; s < c.plan.stageCount(); ++s)
                CHECK(counts[static_cast<std::size_t>(s)] == c.plan.stages[s].layerCount());
        }
        // bash sources it into an array of the flags and their values.
        const fs::path file = fs::temp_directory_path() / ("pw-megatron-" + std::to_string(::getpid()) + ".sh");
        writeFile(file, text);
        const auto [status, out]
            = shell("bash -c 'source \"$1\" && printf \"%s\\n\" \"${PIPEWRIGHT_MEGATRON_ARGS[@]}\"' _ " + file.string()
                + " | grep -c -- '^--'");
        fs::remove(file);
        CHECK(status == 0);
        int flags = 0;
        for (std::size_t at = text.find("\n  --"); at != std::string::npos; at = text.find("\n  --", at + 1))
            ++flags;
        CHECK(std::stoi(out) == flags);
    }
    // The 64-stage plan's 96 layers do not split evenly (stages of 1 and 2 layers): the layout says so.
    const PlanExport gpt3 = exporter.write(gpt3Plan());
    const std::string gpt3Layout = megatronArg(gpt3.files.front().text, "--pipeline-model-parallel-layout");
    CHECK_THAT(gpt3Layout, Catch::StartsWith("\"Et|t*2|"));
    CHECK(megatronArg(gpt3.files.front().text, "--recompute-granularity") == "full");
    CHECK(megatronArg(gpt3.files.front().text, "--bf16") == "(set)");
    // An even split is Megatron's default: no layout, and the interleaved one gives the layers per virtual stage.
    Plan even = exportsDemoPlan("gpt2-tiny-local.plan.json");
    even.stages = {{0, 1, {0}}, {2, 2, {1}}, {3, 3, {0}}, {4, 5, {1}}};
    even.schedule.kind = "interleaved";
    even.schedule.chunks = 2;
    const PlanExport evenExport = exporter.write(even);
    CHECK(megatronArg(evenExport.files.front().text, "--pipeline-model-parallel-layout").empty());
    CHECK(megatronArg(evenExport.files.front().text, "--num-layers-per-virtual-pipeline-stage") == "1");
}

TEST_CASE("DeepSpeed partitions match their golden files and parse as JSON and Python", "[exports]")
{
    const PlanExporter& exporter = *findPlanExporter("deepspeed");
    const fs::path dir = fs::temp_directory_path() / ("pw-exports-ds-" + std::to_string(::getpid()));
    for (const auto& c : cases()) {
        INFO(c.name);
        if (c.plan.schedule.kind != "1f1b") {
            CHECK_THROWS_WITH(exporter.write(c.plan), Catch::Contains("DeepSpeed's pipeline engine runs its 1F1B"));
            continue;
        }
        const PlanExport e = exporter.write(c.plan);
        checkGolden(c.name, "deepspeed", e);
        const auto config = nlohmann::json::parse(fileNamed(e, "ds_config.json")->text);
        CHECK(config.at("gradient_accumulation_steps") == replicaMicrobatches(c.plan));
        CHECK(config.at("train_batch_size").get<long long>() == planBatch(c.plan)); // what the plan trains per step
        CHECK(config.at("train_batch_size").get<int>()
            == config.at("train_micro_batch_size_per_gpu").get<int>() * replicaMicrobatches(c.plan)
                * c.plan.dataReplicas(0));
        // The Python file runs (without DeepSpeed it only defines the numbers) and its PARTS are the stages' cuts.
        writeFile(dir / "pipeline_partition.py", fileNamed(e, "pipeline_partition.py")->text);
        const auto [status, out] = shell("cd " + dir.string()
            + " && python3 -c 'import pipeline_partition as p; print(p.NUM_STAGES, p.PARTS, len(p.LAYERS))'");
        INFO(out);
        REQUIRE(status == 0);
        std::string parts;
        for (const auto& s : c.plan.stages)
            parts += std::to_string(s.first_layer) + ", ";
        const int layers = c.plan.model->layerCount();
        CHECK(out
            == std::to_string(c.plan.stageCount()) + " [" + parts + std::to_string(layers) + "] "
                + std::to_string(layers) + "\n");
    }
    fs::remove_all(dir);
}

TEST_CASE("exports of a replicated plan number each replica's microbatches and train the plan's batch", "[exports]")
{
    // 4 stages x 2 replicas, 8 microbatches of 4: replica 0 runs the plan's 0, 2, 4, 6, replica 1 runs 1, 3, 5, 7;
    // each runtime sees 4 microbatches per replica, numbered 0-3 on every rank, and a global batch of 32 samples.
    const Plan plan = exportsReplicatedPlan();
    REQUIRE(plan.schedule.microbatches == 8);
    REQUIRE(plan.model->microbatch_size == 4);
    const PlanExport tt = findPlanExporter("torchtitan")->write(plan);
    const auto rows = parseCsv(fileNamed(tt, "schedule.csv")->text);
    REQUIRE(rows.size() == 4);
    for (const auto& row : rows) {
        std::set<int> microbatches;
        for (const auto& a : row)
            microbatches.insert(a.microbatch);
        CHECK(microbatches == std::set<int> {0, 1, 2, 3});
    }
    CHECK(rows[0].front().kind == 'F');
    CHECK(rows[0].front().microbatch == 0);
    CHECK(rows[0][1].microbatch == 1); // 0F0,0F1,... (the plan's 0 and 2), no gaps
    const std::string& toml = fileNamed(tt, "torchtitan.toml")->text;
    CHECK_THAT(toml, Catch::Contains("local_batch_size = 16\n"));
    CHECK_THAT(toml, Catch::Contains("data_parallel_replicate_degree = 2\n"));
    CHECK_THAT(toml, Catch::Contains("4 microbatches of 4 per step on each replica (32 samples per step)"));
    const PlanExport mg = findPlanExporter("megatron")->write(plan);
    CHECK(megatronArg(mg.files.front().text, "--global-batch-size") == "32");
    CHECK(megatronArg(mg.files.front().text, "--micro-batch-size") == "4");
    const PlanExport ds = findPlanExporter("deepspeed")->write(plan);
    const auto config = nlohmann::json::parse(fileNamed(ds, "ds_config.json")->text);
    CHECK(config.at("train_batch_size") == 32);
    CHECK(config.at("gradient_accumulation_steps") == 4);
    CHECK(config.at("train_micro_batch_size_per_gpu") == 4);
    // Microbatches that do not split evenly over the replicas cannot be exported: the runtimes give each the same.
    Plan odd = plan;
    odd.schedule.microbatches = 7;
    for (const auto* e : planExporters())
        CHECK_THROWS_WITH(e->write(odd), Catch::Contains("7 microbatches per step do not split evenly over 2"));
}

TEST_CASE("every exporter refuses what its runtime cannot express and names the field", "[exports]")
{
    const Plan tiny = exportsDemoPlan("gpt2-tiny-local.plan.json");
    const auto refusal = [](const std::string& format, const Plan& plan) -> std::string {
        try {
            findPlanExporter(format)->write(plan);
        } catch (const InputError& e) {
            return e.field() + ": " + e.message();
        }
        return "accepted";
    };
    for (const auto* exporter : planExporters()) {
        const std::string name(exporter->name());
        INFO(name);
        // Devices of two types.
        Plan mixed = tiny;
        Cluster cluster = *tiny.cluster;
        DeviceType slow = cluster.device_types.front();
        slow.name = "cpu-slow";
        cluster.device_types.push_back(slow);
        Node a = cluster.nodes.front();
        a.count = 1;
        Node b = a;
        b.name = "other";
        b.device_type = "cpu-slow";
        cluster.nodes = std::vector<Node> {a, b};
        mixed.cluster = cluster;
        mixed.validate();
        CHECK(refusal(name, mixed)
            == "/cluster/device_types: " + name
                + " cannot express this plan: its devices are of 2 types (cpu, cpu-slow); the runtime gives every "
                  "stage the same kind of GPU");
        // PipeDream's asynchronous schedule.
        Plan async = tiny;
        async.schedule.kind = "pipedream";
        async.validate();
        CHECK_THAT(refusal(name, async),
            Catch::StartsWith("/schedule/kind: " + name
                + " cannot express this plan: "
                  "schedule 'pipedream' is asynchronous"));
        // Stage 0 replicated, stage 1 not.
        Plan replicated = exportsDemoPlan("gpt2-tiny-local.plan.json");
        Cluster three = *replicated.cluster;
        three.nodes.front().count = 3;
        replicated.cluster = three;
        replicated.stages = {{0, 2, {0, 1}}, {3, 5, {2}}};
        replicated.validate();
        CHECK_THAT(refusal(name, replicated), Catch::StartsWith("/stages/1/devices: " + name));
        CHECK_THAT(refusal(name, replicated), Catch::Contains("replicates every stage alike"));
    }
    // GPipe is not among Megatron's schedules; DeepSpeed runs one chunk of 1F1B only.
    Plan gpipe = tiny;
    gpipe.schedule.kind = "gpipe";
    CHECK_THAT(refusal("megatron", gpipe), Catch::StartsWith("/schedule/kind: megatron cannot express"));
    CHECK(refusal("torchtitan", gpipe) == "accepted");
    CHECK_THAT(refusal("deepspeed", interleavedPlan()), Catch::StartsWith("/schedule/kind: deepspeed"));
    for (const auto& c : zeroBubbleCases()) {
        INFO(c.name);
        CHECK_THAT(refusal("megatron", c.plan), Catch::StartsWith("/schedule/kind: megatron cannot express"));
        CHECK_THAT(refusal("deepspeed", c.plan), Catch::StartsWith("/schedule/kind: deepspeed cannot express"));
    }
    // A profile that is not a transformer: torchtitan and Megatron cut by module names and layer kinds.
    Plan notTransformer = tiny;
    ModelProfile model = *tiny.model;
    model.layers[2].kind = "Conv2d";
    notTransformer.model = model;
    CHECK_THAT(refusal("torchtitan", notTransformer),
        Catch::StartsWith("/model/layers/2/kind: torchtitan cannot express this plan: layer 2 ('transformer_2') is a "
                          "'Conv2d', not a 'transformer_layer'"));
    CHECK_THAT(refusal("megatron", notTransformer), Catch::StartsWith("/model/layers/2/kind: megatron"));
    CHECK(refusal("deepspeed", notTransformer) == "accepted"); // a PipelineModule is any sequence of layers
}
