// SPDX-License-Identifier: MIT
// Reading torch.distributed.pipelining profiler traces back as a run of the plan (trace_import.h).
#include "trace_import.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <queue>
#include <regex>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "app/run/diagnosis.h"
#include "planner/errors.h"
#include "planner/export/export.h"

namespace pw::app {

namespace {

using planner::ActionKind;
using planner::InputError;

/// @brief One "PP:" or optimizer event of a trace, in seconds on its rank's clock.
struct Event
{
    std::string name; ///< without "PP:"
    double t0 = 0, t1 = 0;
};

/// @brief A compute action as the CSV and the runtime name it: {stage}{F|I|B|W}{microbatch}.
struct Cell
{
    int stage = 0;
    char kind = 'F';
    int microbatch = 0;
    bool operator==(const Cell&) const = default;
};

std::optional<Cell> parseCell(const std::string& text)
{
    static const std::regex cell(R"(^(\d+)([FIBW])(\d+)$)");
    std::smatch m;
    if (!std::regex_match(text, m, cell))
        return std::nullopt;
    return Cell {std::stoi(m[1]), m[2].str()[0], std::stoi(m[3])};
}

/// The two actions of an F&B pair "(a;b)OVERLAP_F_B", or nullopt.
std::optional<std::pair<std::string, std::string>> parsePair(const std::string& text)
{
    static const std::regex pair(R"(^\(([^;()]+);([^;()]+)\)OVERLAP_F_B$)");
    std::smatch m;
    if (!std::regex_match(text, m, pair))
        return std::nullopt;
    return std::pair {m[1].str(), m[2].str()};
}

ActionKind kindOf(char letter)
{
    switch (letter) {
    case 'F':
        return ActionKind::Forward;
    case 'B':
        return ActionKind::Backward;
    case 'I':
        return ActionKind::BackwardInput;
    default:
        return ActionKind::BackwardWeight;
    }
}

/// @brief One rank's trace: its events by start, and where it came from.
struct RankTrace
{
    std::string file;
    std::vector<Event> compute; ///< PP: compute actions and F&B pairs
    std::vector<Event> transfers; ///< PP:{stage}SEND_F{mb} and the like
    std::vector<Event> optimizer; ///< Optimizer.step#...
    std::string source;
};

RankTrace readTrace(const std::filesystem::path& path, int& rank)
{
    RankTrace t;
    t.file = path.string();
    std::ifstream in(path);
    if (!in)
        throw InputError(t.file, 0, "", "cannot read the trace");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        throw InputError(t.file, 0, "", std::string("not a JSON trace: ") + e.what());
    }
    // Kineto's trace: an object with traceEvents; the legacy profiler's export_chrome_trace (PyTorch without Kineto):
    // the array of events itself, without categories.
    if (j.is_array())
        j = nlohmann::json {{"traceEvents", std::move(j)}};
    if (!j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array())
        throw InputError(t.file, 0, "/traceEvents", "not a PyTorch profiler (Kineto) trace: no traceEvents array");
    if (j.contains("distributedInfo") && j["distributedInfo"].is_object() && j["distributedInfo"].contains("rank")
        && j["distributedInfo"]["rank"].is_number_integer())
        rank = j["distributedInfo"]["rank"].get<int>();
    // Device time where the trace has it (the annotations Kineto puts on the GPU's stream around an action's
    // kernels), else the host's: for the compute actions and for the transfers each, as an action of either kind that
    // ran no kernel has no device annotation (transfers over Gloo from host memory).
    const auto isTransfer = [](const std::string& name) {
        return name.find("SEND_") != std::string::npos || name.find("RECV_") != std::string::npos;
    };
    bool gpuCompute = false, gpuTransfers = false;
    for (const auto& e : j["traceEvents"])
        if (e.is_object() && e.value("cat", "") == "gpu_user_annotation" && e.value("name", "").rfind("PP:", 0) == 0)
            (isTransfer(e.value("name", "")) ? gpuTransfers : gpuCompute) = true;
    const std::string computeSource = gpuCompute ? "gpu_user_annotation" : "user_annotation";
    const std::string transferSource = gpuTransfers ? "gpu_user_annotation" : "user_annotation";
    t.source = computeSource == transferSource ? computeSource
                                               : computeSource + " (compute), " + transferSource + " (transfers)";
    std::size_t index = 0;
    for (const auto& e : j["traceEvents"]) {
        const std::string where = "/traceEvents/" + std::to_string(index++);
        if (!e.is_object() || e.value("ph", "") != "X")
            continue;
        const std::string name = e.value("name", "");
        const std::string cat = e.value("cat", "user_annotation"); // the legacy profiler's events have none
        const bool pp = name.rfind("PP:", 0) == 0 && cat == (isTransfer(name) ? transferSource : computeSource);
        const bool optimizer = name.rfind("Optimizer.step#", 0) == 0 && cat == "user_annotation";
        if (!pp && !optimizer)
            continue;
        if (!e.contains("ts") || !e["ts"].is_number() || !e.contains("dur") || !e["dur"].is_number())
            throw InputError(t.file, 0, where, "event '" + name + "' has no numeric ts and dur");
        const double t0 = e["ts"].get<double>() * 1e-6, t1 = t0 + e["dur"].get<double>() * 1e-6;
        if (optimizer) {
            t.optimizer.push_back({name, t0, t1});
            continue;
        }
        (isTransfer(name) ? t.transfers : t.compute).push_back({name.substr(3), t0, t1});
    }
    const auto byStart = [](const Event& a, const Event& b) { return a.t0 < b.t0 || (a.t0 == b.t0 && a.t1 > b.t1); };
    std::sort(t.compute.begin(), t.compute.end(), byStart);
    std::sort(t.transfers.begin(), t.transfers.end(), byStart);
    std::sort(t.optimizer.begin(), t.optimizer.end(), byStart);
    return t;
}

/// The exported CSV's rows: per rank its compute cells in order.
std::vector<std::vector<std::string>> exportedRows(const planner::Plan& plan)
{
    const auto* exporter = planner::findPlanExporter("torchtitan");
    const auto e = exporter->write(plan);
    for (const auto& f : e.files)
        if (f.name == "schedule.csv") {
            std::vector<std::vector<std::string>> rows;
            std::istringstream lines(f.text);
            for (std::string line; std::getline(lines, line);) {
                auto& row = rows.emplace_back();
                std::istringstream cells(line);
                for (std::string c; std::getline(cells, c, ',');)
                    row.push_back(c);
            }
            return rows;
        }
    throw InputError("the torchtitan export of the plan has no schedule.csv");
}

} // namespace

ImportedRun importPipeliningTraces(const planner::Plan& plan, const std::vector<std::filesystem::path>& traces)
{
    plan.validate();
    if (plan.modelParallel() > 1)
        throw InputError({}, 0, plan.tensor_parallel > 1 ? "/tensor_parallel" : "/context_parallel",
            "import-trace reads one pipeline's ranks: the plan has tensor- or context-parallel groups");
    for (int s = 0; s < plan.stageCount(); ++s)
        if (plan.stages[static_cast<std::size_t>(s)].devices.size() != 1)
            throw InputError({}, 0, "/stages/" + std::to_string(s) + "/devices",
                "import-trace reads one pipeline's ranks: stage " + std::to_string(s) + " has data-parallel replicas");
    const auto rows = exportedRows(plan);
    const int ranks = static_cast<int>(rows.size());
    if (static_cast<int>(traces.size()) != ranks)
        throw InputError({}, 0, "",
            "the plan's pipeline has " + std::to_string(ranks) + " ranks: give one trace per rank, not "
                + std::to_string(traces.size()));
    std::vector<std::optional<RankTrace>> byRank(static_cast<std::size_t>(ranks));
    for (std::size_t i = 0; i < traces.size(); ++i) {
        int rank = static_cast<int>(i);
        auto t = readTrace(traces[i], rank);
        if (rank < 0 || rank >= ranks)
            throw InputError(t.file, 0, "/distributedInfo/rank",
                "rank " + std::to_string(rank) + " is not one of the plan's " + std::to_string(ranks) + " ranks");
        if (byRank[static_cast<std::size_t>(rank)])
            throw InputError(t.file, 0, "/distributedInfo/rank",
                "rank " + std::to_string(rank) + " is also " + byRank[static_cast<std::size_t>(rank)]->file);
        byRank[static_cast<std::size_t>(rank)] = std::move(t);
    }

    // The compute actions in the exported order, step after step: the first mismatch refuses the trace.
    ImportedRun out;
    const int m = plan.schedule.microbatches;
    struct Matched
    {
        int rank;
        Cell cell;
        int step;
        double t0, t1;
    };
    std::vector<Matched> matched;
    int steps = -1;
    for (int r = 0; r < ranks; ++r) {
        const auto& t = *byRank[static_cast<std::size_t>(r)];
        const auto& row = rows[static_cast<std::size_t>(r)];
        std::size_t pos = 0;
        const auto mismatch = [&](const std::string& trace, std::size_t at) {
            const std::size_t step = at / row.size(), i = at % row.size();
            throw InputError(t.file, 0, "",
                "rank " + std::to_string(r) + ", step " + std::to_string(step) + ", action " + std::to_string(i)
                    + ": the plan runs " + row[i] + " here, the trace " + trace
                    + " (a trace of another plan or schedule)");
        };
        for (std::size_t e = 0; e < t.compute.size(); ++e, ++pos) {
            const std::string& expected = row[pos % row.size()];
            const int step = static_cast<int>(pos / row.size());
            const Event& ev = t.compute[e];
            if (ev.name != expected)
                mismatch(ev.name, pos);
            if (const auto pair = parsePair(ev.name)) {
                // Its forward and backward timed apart inside it, or the pair is not read (not guessed).
                for (const auto& sub : {pair->first, pair->second}) {
                    if (e + 1 >= t.compute.size() || t.compute[e + 1].name != sub || t.compute[e + 1].t0 < ev.t0
                        || t.compute[e + 1].t1 > ev.t1 + 1e-9)
                        throw InputError(t.file, 0, "",
                            "rank " + std::to_string(r) + ", step " + std::to_string(step) + ": the F&B pair " + ev.name
                                + " has no " + sub + " timed inside it: its forward and backward cannot be told apart");
                    ++e;
                    matched.push_back({r, *parseCell(sub), step, t.compute[e].t0, t.compute[e].t1});
                }
                continue;
            }
            const auto cell = parseCell(ev.name);
            if (!cell)
                mismatch(ev.name, pos);
            matched.push_back({r, *cell, step, ev.t0, ev.t1});
        }
        if (pos % row.size() != 0)
            throw InputError(t.file, 0, "",
                "rank " + std::to_string(r) + " stops within step " + std::to_string(pos / row.size()) + ": "
                    + row[pos % row.size()] + " and the " + std::to_string(row.size() - pos % row.size() - 1)
                    + " actions after it are missing");
        const int rankSteps = static_cast<int>(pos / row.size());
        if (rankSteps == 0)
            throw InputError(t.file, 0, "", "rank " + std::to_string(r) + " has no PP: action of the plan");
        if (steps >= 0 && rankSteps != steps)
            throw InputError(t.file, 0, "",
                "rank " + std::to_string(r) + " ran " + std::to_string(rankSteps) + " steps, rank 0 "
                    + std::to_string(steps));
        steps = rankSteps;
    }
    out.steps = steps;

    // The program of the plan as torch.distributed.pipelining ran it (no all-reduce of weights tied across stages)
    // over those steps: each matched action's index on its device.
    out.plan = planner::findPlanExporter("torchtitan")->runsAs(plan);
    out.untied = out.plan != plan;
    const auto program = runProgramSchedule(out.plan, steps);
    std::map<std::tuple<int, int, int, int>, int> index; // (device, kind, stage, microbatch) -> action
    for (std::size_t d = 0; d < program.devices.size(); ++d)
        for (std::size_t i = 0; i < program.devices[d].size(); ++i) {
            const auto& a = program.devices[d][i];
            index[{static_cast<int>(d), static_cast<int>(a.kind), a.stage, a.microbatch}] = static_cast<int>(i);
        }
    const auto deviceOf = [&](int stage) { return plan.stages[static_cast<std::size_t>(stage)].devices.front(); };
    std::vector<planner::Span> spans;
    std::map<std::tuple<int, int, int>, std::pair<double, double>> computeTimes; // (kind, stage, mb) -> rank times
    for (const auto& a : matched) {
        planner::Span s;
        s.device = deviceOf(a.cell.stage);
        s.kind = kindOf(a.cell.kind);
        s.stage = a.cell.stage;
        s.microbatch = a.step * m + a.cell.microbatch;
        const auto it = index.find({s.device, static_cast<int>(s.kind), s.stage, s.microbatch});
        if (it == index.end())
            throw InputError(byRank[static_cast<std::size_t>(a.rank)]->file, 0, "",
                "the plan's program has no " + std::string(planner::toString(s.kind)) + " of stage "
                    + std::to_string(s.stage) + " microbatch " + std::to_string(s.microbatch) + " on device "
                    + std::to_string(s.device));
        s.action = it->second;
        s.t0 = a.t0;
        s.t1 = a.t1;
        s.weight_version = a.step;
        computeTimes[{static_cast<int>(s.kind), s.stage, s.microbatch}] = {a.t0, a.t1};
        spans.push_back(s);
    }

    // Transfers: PP:{stage}SEND_F{mb} and the like, the k-th of a name in step k. A receive spans from its posting to
    // the start of the action that consumes it (the runtime waits for it there).
    static const std::regex transfer(R"(^(\d+)(SEND|RECV)_([FB])(\d+)$)");
    for (int r = 0; r < ranks; ++r) {
        const auto& t = *byRank[static_cast<std::size_t>(r)];
        std::map<std::string, int> seen;
        for (const auto& ev : t.transfers) {
            std::smatch mt;
            if (!std::regex_match(ev.name, mt, transfer))
                throw InputError(t.file, 0, "", "rank " + std::to_string(r) + ": unknown action PP:" + ev.name);
            const int stage = std::stoi(mt[1]), local = std::stoi(mt[4]), step = seen[ev.name]++;
            const bool send = mt[2] == "SEND", gradient = mt[3] == "B";
            planner::Span s;
            s.device = deviceOf(stage);
            s.microbatch = step * m + local;
            s.kind = send ? (gradient ? ActionKind::SendGradient : ActionKind::SendActivation)
                          : (gradient ? ActionKind::RecvGradient : ActionKind::RecvActivation);
            // The program names a transfer by its producing stage.
            s.stage = send ? stage : gradient ? stage + 1 : stage - 1;
            s.lane = send ? planner::Lane::Send : planner::Lane::Recv;
            const auto it = index.find({s.device, static_cast<int>(s.kind), s.stage, s.microbatch});
            if (it == index.end() || step >= steps)
                throw InputError(t.file, 0, "",
                    "rank " + std::to_string(r) + ": PP:" + ev.name + " (step " + std::to_string(step)
                        + ") is not a transfer of the plan's program");
            s.action = it->second;
            const auto& a = program.devices[static_cast<std::size_t>(s.device)][static_cast<std::size_t>(s.action)];
            s.peer = a.peer;
            s.bytes = a.bytes;
            s.t0 = ev.t0;
            s.t1 = ev.t1;
            if (!send) {
                const auto consumer
                    = computeTimes.find({static_cast<int>(gradient ? ActionKind::BackwardInput : ActionKind::Forward),
                        stage, s.microbatch});
                const auto fused = computeTimes.find({static_cast<int>(ActionKind::Backward), stage, s.microbatch});
                const auto& c = consumer != computeTimes.end() ? consumer : fused;
                if (c != computeTimes.end())
                    s.t1 = std::max(s.t1, c->second.first);
            }
            spans.push_back(s);
        }
    }
    // Optimizer steps: one per rank and step (the runtime's optimizer steps the rank's stages together), the device's
    // last OptimizerStep action of that step.
    for (int r = 0; r < ranks; ++r) {
        const auto& t = *byRank[static_cast<std::size_t>(r)];
        const int device = deviceOf(r);
        std::vector<int> steps_;
        for (std::size_t i = 0; i < program.devices[static_cast<std::size_t>(device)].size(); ++i)
            if (program.devices[static_cast<std::size_t>(device)][i].kind == ActionKind::OptimizerStep)
                steps_.push_back(static_cast<int>(i));
        const std::size_t per = steps_.size() / static_cast<std::size_t>(steps);
        for (std::size_t k = 0; k < t.optimizer.size() && k < static_cast<std::size_t>(steps); ++k) {
            planner::Span s;
            s.device = device;
            s.action = steps_[(k + 1) * per - 1];
            const auto& a = program.devices[static_cast<std::size_t>(device)][static_cast<std::size_t>(s.action)];
            s.kind = ActionKind::OptimizerStep;
            s.stage = a.stage;
            s.microbatch = -1;
            s.weight_version = a.weight_version;
            s.t0 = t.optimizer[k].t0;
            s.t1 = t.optimizer[k].t1;
            spans.push_back(s);
        }
    }

    // Every compute and transfer action of the program matched.
    std::map<std::pair<int, int>, bool> have;
    for (const auto& s : spans)
        have[{s.device, s.action}] = true;
    for (std::size_t d = 0; d < program.devices.size(); ++d)
        for (std::size_t i = 0; i < program.devices[d].size(); ++i) {
            const auto& a = program.devices[d][i];
            const bool named = a.kind != ActionKind::AllReduce && a.kind != ActionKind::OptimizerStep
                && a.kind != ActionKind::WavePush && a.kind != ActionKind::WavePull;
            if (named && !have.count({static_cast<int>(d), static_cast<int>(i)}))
                throw InputError(traces.front().string(), 0, "",
                    "device " + std::to_string(d) + "'s " + planner::actionLabel(a) + " is in no trace");
            out.matched += named ? 1 : 0;
        }

    // Clocks: each rank's offset against rank 0 from the data they exchange. F(s, k) on b starts after F(s-1, k)
    // ended on a; B(s, k) on a after B(s+1, k) on b: off_b - off_a in [lower, upper]; the value nearest 0 in it.
    const auto rankOf = [&](int device) {
        for (int r = 0; r < ranks; ++r)
            if (deviceOf(r) == device)
                return r;
        return 0;
    };
    std::map<std::pair<int, int>, std::pair<double, double>> bounds; // (a, b) -> [lower, upper] of off_b - off_a
    const auto bound = [&](int a, int b) -> std::pair<double, double>& {
        return bounds
            .try_emplace({a, b}, -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity())
            .first->second;
    };
    std::map<std::tuple<int, int, int>, const planner::Span*> byKey;
    for (const auto& s : spans)
        if (isCompute(s.kind) && s.kind != ActionKind::OptimizerStep && s.kind != ActionKind::BackwardWeight)
            byKey[{s.kind == ActionKind::Forward ? 0 : 1, s.stage, s.microbatch}] = &s;
    for (const auto& [key, s] : byKey) {
        const auto [backward, stage, mb] = key;
        const auto from = byKey.find({backward, backward ? stage + 1 : stage - 1, mb});
        if (from == byKey.end())
            continue;
        const int a = rankOf(from->second->device), b = rankOf(s->device);
        if (a == b)
            continue;
        // s (on b) starts after `from` (on a) ends: off_b - off_a >= from.t1 - s.t0.
        const double need = from->second->t1 - s->t0;
        bound(a, b).first = std::max(bound(a, b).first, need);
        bound(b, a).second = std::min(bound(b, a).second, -need);
    }
    out.clock_offsets_s.assign(static_cast<std::size_t>(ranks), std::numeric_limits<double>::quiet_NaN());
    out.clock_offsets_s[0] = 0;
    std::queue<int> todo;
    todo.push(0);
    while (!todo.empty()) {
        const int a = todo.front();
        todo.pop();
        for (const auto& [pair, range] : bounds) {
            if (pair.first != a || !std::isnan(out.clock_offsets_s[static_cast<std::size_t>(pair.second)]))
                continue;
            const auto [lower, upper] = range;
            const double delta = lower <= upper ? std::clamp(0.0, lower, upper) : (lower + upper) / 2;
            out.clock_offsets_s[static_cast<std::size_t>(pair.second)]
                = out.clock_offsets_s[static_cast<std::size_t>(a)] + delta;
            todo.push(pair.second);
        }
    }
    for (auto& o : out.clock_offsets_s)
        if (std::isnan(o))
            o = 0;
    double start = std::numeric_limits<double>::infinity();
    for (auto& s : spans) {
        const double off = out.clock_offsets_s[static_cast<std::size_t>(rankOf(s.device))];
        s.t0 += off;
        s.t1 += off;
        start = std::min(start, s.t0);
    }
    for (auto& s : spans) {
        s.t0 -= start;
        s.t1 -= start;
    }
    std::sort(spans.begin(), spans.end(), [](const planner::Span& x, const planner::Span& y) {
        return std::tie(x.device, x.t0, x.action) < std::tie(y.device, y.t0, y.action);
    });
    out.measured.source = planner::Timeline::Source::Measured;
    out.measured.clock = ranks > 1 ? planner::ClockDomain::Aligned : planner::ClockDomain::Host;
    out.measured.label = "imported from " + std::to_string(ranks) + " PyTorch profiler traces";
    for (int d = 0; d < plan.cluster->deviceCount(); ++d)
        out.measured.device_names.push_back(plan.cluster->deviceName(d));
    out.measured.spans = std::move(spans);
    out.source = byRank.front()->source;
    for (const auto& t : byRank)
        out.files.push_back(t->file);
    return out;
}

} // namespace pw::app
