// SPDX-License-Identifier: MIT
#include "commands.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli.h"
#include "planner/analysis/advisor.h"
#include "planner/device_presets.h"
#include "planner/errors.h"
#include "planner/export/export.h"
#include "planner/io/chrome_trace.h"
#include "planner/io/graph_txt.h"
#include "planner/io/hf_config.h"
#include "planner/io/json_file.h"
#include "planner/io/transformer.h"
#include "planner/schedule/generator.h"
#include "planner/sim/calibration.h"
#include "planner/sim/simulator.h"
#include "report.h"

namespace pw::cli {

using nlohmann::json;
using namespace pw::planner;

namespace {

void writeText(const std::string& path, const std::string& text)
{
    std::ofstream f(path, std::ios::binary);
    if (!f)
        throw InputError(path, 0, "", "cannot write the file");
    f << text;
    if (!f.flush())
        throw InputError(path, 0, "", "write failed");
}

/// Generates, validates and simulates the plan's schedule, under the calibrated costs of the file `costs` when
/// given (errors name that file); throws InputError on any problem.
SimulationResult predict(Plan& plan, bool spans, Schedule* scheduleOut = nullptr, const std::string& costs = {})
{
    // Simulated over the batches its kind needs to show its steady state (zb-h2, zbv, 2BW: simulatedIterations),
    // as the partitioners and the app simulate it; the plan and its exported schedule keep their own.
    Plan simulated = plan;
    simulated.schedule.iterations = simulatedIterations(plan);
    const auto finish = [&plan](SimulationResult result) {
        if (!std::isfinite(result.iteration_time_s) || !std::isfinite(result.bubble_fraction))
            throw InputError("the predicted iteration time is not finite (" + formatSeconds(result.iteration_time_s)
                + "): a layer time or a transfer over a link overflows; check the model's times (ms) and the "
                  "cluster's bandwidths (bytes/s)");
        plan.predicted = predictedMetrics(result);
        return result;
    };
    // Metrics only (plan, simulate without a trace): a plan of identical data-parallel pipelines is simulated through
    // a few of them, exactly (simulateDataParallel); 16,384 GPUs took minutes and 21 GB whole.
    if (!spans && !scheduleOut && costs.empty())
        return finish(simulateDataParallel(simulated, SimulationOptions {false, false}));
    Schedule schedule = generateSchedule(plan);
    auto report = validate(schedule, plan);
    if (!report.ok)
        throw InputError("the generated schedule is invalid: " + report.errors.front());
    SimulationOptions options;
    options.record_spans = spans;
    options.record_memory = spans;
    const Schedule steady
        = simulated.schedule.iterations == plan.schedule.iterations ? schedule : generateSchedule(simulated);
    auto result = finish(costs.empty() ? simulate(simulated, steady, options)
                                       : simulate(simulated, steady, loadCostModel(costs, simulated), options));
    if (scheduleOut)
        *scheduleOut = std::move(schedule);
    return result;
}

DeviceType deviceFromArgument(const std::string& arg)
{
    if (auto preset = devicePreset(arg))
        return *preset;
    if (!std::filesystem::exists(arg))
        throw InputError({}, 0, "--device", "'" + arg + "' is neither a device preset nor a device-type JSON file");
    auto j = readJsonFile(arg);
    if (!j.is_object())
        throw InputError(arg, 1, "/", "a device-type file holds one object like a cluster's device_types entry");
    if (!j.contains("name") || !j.at("name").is_string())
        throw InputError(arg, 1, "/name", "a device type needs a name");
    // A device-type file is one entry of a cluster's device_types.
    json cluster = {{"device_types", json::array({j})},
        {"nodes", json::array({{{"name", "n"}, {"device_type", j.value("name", "")}, {"count", 1}}})}};
    try {
        return clusterFromJson(cluster).device_types.at(0);
    } catch (const InputError& e) {
        std::string field = e.field().rfind("/device_types/0", 0) == 0 ? e.field().substr(15) : e.field();
        if (field.empty())
            field = "/";
        std::ifstream f(arg, std::ios::binary);
        std::stringstream text;
        text << f.rdbuf();
        throw InputError(arg, lineOfJsonPointer(text.str(), field), field, e.message());
    }
}

/// An error about a loaded plan's content, located in the plan's file (line of the field when known).
InputError inPlanFile(const InputError& e, const std::string& path)
{
    if (!e.source().empty())
        return e;
    int line = 0;
    if (!e.field().empty()) {
        std::ifstream f(path, std::ios::binary);
        std::stringstream text;
        text << f.rdbuf();
        line = lineOfJsonPointer(text.str(), e.field());
    }
    return InputError(path, line, e.field(), e.message());
}

} // namespace

std::vector<int> parseBoundaries(const std::string& text)
{
    std::vector<int> out;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        try {
            std::size_t used = 0;
            int v = std::stoi(item, &used);
            if (used != item.size())
                throw std::invalid_argument(item);
            out.push_back(v);
        } catch (const std::exception&) {
            throw InputError({}, 0, "--boundaries", "'" + item + "' is not a layer index");
        }
    }
    return out;
}

void importPipeDream(const ImportOptions& o, std::ostream& out)
{
    auto model = loadGraphTxt(o.input);
    if (!o.name.empty())
        model.name = o.name;
    if (o.batch_size > 0)
        model.microbatch_size = o.batch_size;
    writeJsonFile(o.output, toJson(model));
    if (o.json)
        out << json {{"model", model.name}, {"layers", model.layerCount()}, {"output", o.output}}.dump(2) << "\n";
    else
        out << "imported " << model.layerCount() << " layers of " << model.name << " -> " << o.output << "\n";
}

void transformer(const TransformerOptions& o, std::ostream& out)
{
    const auto device = deviceFromArgument(o.device);
    const int bytes = !o.precision.empty() ? (o.precision == "fp32" ? 4 : 2)
        : o.bytes_per_element > 0          ? o.bytes_per_element
                                           : defaultBytesPerElement(device);
    TransformerConfig c;
    if (!o.hf_config.empty()) {
        c = loadHfConfig(o.hf_config, RunShape {o.seq, o.microbatch, bytes});
    } else {
        for (auto [name, value] :
            {std::pair {"--layers", o.layers}, {"--hidden", o.hidden}, {"--heads", o.heads}, {"--vocab", o.vocab}})
            if (value == 0)
                throw UsageError({}, 0, name, "is required (or give the model's shape with --hf-config)");
        c = TransformerConfig {o.layers, o.hidden, o.heads, o.seq, o.vocab, o.microbatch, bytes};
        c.ffn_hidden = o.ffn_hidden;
        c.kv_heads = o.kv_heads;
        if (!o.mlp.empty())
            c.mlp = mlpKindNamed(o.mlp, "--mlp");
        if (!o.norm.empty())
            c.norm = normKindNamed(o.norm, "--norm");
        if (!o.positions.empty())
            c.positions = positionKindNamed(o.positions, "--positions");
        c.tied_embeddings = !o.untied_embeddings;
        if (o.no_bias)
            c.bias = BiasKind::None;
        c.dropout = !o.no_dropout;
        if (!c.isGpt2Block())
            c.family = "transformer";
        c.validate();
    }
    c.flash_attention = o.attention != "materialized";
    c.fp32_cross_entropy = o.cross_entropy != "native";
    c.fp8 = o.precision == "fp8";
    TransformerProfileOptions po;
    if (!std::isnan(o.efficiency))
        po.efficiency = o.efficiency;
    if (!o.gemm_table.empty()) {
        if (!std::isnan(o.efficiency))
            throw UsageError({}, 0, "--gemm-table", "times products by shape; leave out --efficiency");
        try {
            po.gemm_table = std::make_shared<GemmTable>(gemmTableFromJson(readJsonFile(o.gemm_table)));
        } catch (const InputError& e) {
            if (!e.source().empty())
                throw;
            throw InputError(o.gemm_table, 0, e.field(), e.message()); // the table's content: name its file
        }
    }
    auto model = transformerProfile(c, device, po);
    writeJsonFile(o.output, toJson(model));
    // Which time model the profile used: "shapes" (a GEMM table or the default curve) or "flat" (docs/planner.md).
    const bool shapes = resolvedTimeModel(c, device, po) == TransformerTimeModel::Shapes;
    if (o.json)
        out << json {{"model", model.name}, {"layers", model.layerCount()},
            {"parameters", transformerParameterCount(c)}, {"family", c.family}, {"output", o.output},
            {"precision",
                c.fp8                          ? "fp8"
                    : c.bytes_per_element == 4 ? "fp32"
                                               : "bf16"},
            {"time_model", shapes ? (po.gemm_table ? "shapes (GEMM table)" : "shapes (default curve)") : "flat"}}
                   .dump(2)
            << "\n";
    else
        out << "wrote " << model.layerCount() << " layers (" << formatCount(transformerParameterCount(c))
            << " parameters) -> " << o.output << "\n";
}

void plan(const PlanOptions& o, std::ostream& out)
{
    const auto* partitioner = &partitionerNamed(o.algorithm);
    if (auto unused = unusedSharedOptions(*partitioner, o.partition); !unused.empty())
        throw UsageError({}, 0, unused.front(), "means nothing to algorithm '" + o.algorithm + "'; leave it out");
    auto model = loadAnyModel(o.model);
    auto cluster = loadCluster(o.cluster);
    PartitionRequest request {model, cluster, o.partition};
    if (!o.boundaries.empty())
        request.options.boundaries = parseBoundaries(o.boundaries);
    request.options.params = parseSettings(*partitioner, o.settings);
    auto result = partitioner->partition(request, {}, {});
    if (!result.ok())
        throw InputError(o.algorithm + ": " + result.errorText());
    Plan plan = std::move(*result.plan);
    auto sim = predict(plan, false, nullptr, o.costs);
    if (!o.output.empty())
        writeJsonFile(o.output, toJson(plan));
    if (o.json) {
        auto j = metricsJson(plan, sim);
        json diags = json::array();
        for (const auto& d : result.diagnostics)
            diags.push_back({{"code", d.code}, {"message", d.message}});
        j["diagnostics"] = diags;
        if (!o.costs.empty())
            j["costs"] = o.costs;
        out << j.dump(2) << "\n";
    } else {
        printDiagnostics(out, result.diagnostics);
        printPlanSummary(out, plan, sim);
        if (!o.costs.empty())
            out << "predicted with the calibrated costs of " << o.costs << "\n";
        if (!o.output.empty())
            out << "wrote " << o.output << "\n";
    }
    if (auto problem = memoryProblem(plan, sim); !problem.empty())
        throw DoesNotFit(problem);
}

const Partitioner& partitionerNamed(const std::string& name)
{
    if (const auto* p = findPartitioner(name))
        return *p;
    std::string names;
    for (const auto* p : partitioners())
        names += (names.empty() ? "" : ", ") + std::string(p->name());
    // A value the option does not take, as an unknown --schedule is: a usage error (exit status 2).
    throw UsageError({}, 0, "--algorithm", "unknown algorithm '" + name + "' (known: " + names + ")");
}

json parseSettings(const Partitioner& partitioner, const std::vector<std::string>& settings)
{
    json params = json::object();
    const auto specs = partitioner.options();
    for (const auto& item : settings) {
        const auto eq = item.find('=');
        if (eq == std::string::npos || eq == 0)
            throw InputError({}, 0, "--set", "'" + item + "' is not NAME=VALUE");
        const std::string name = item.substr(0, eq);
        const OptionSpec* spec = nullptr;
        for (const auto& s : specs)
            if (s.name == name)
                spec = &s;
        if (!spec) {
            std::string known;
            for (const auto& s : specs)
                known += (known.empty() ? "" : ", ") + s.name;
            throw InputError({}, 0, "--set",
                "algorithm '" + std::string(partitioner.name()) + "' has no option '" + name + "'"
                    + (known.empty() ? "" : " (known: " + known + ")"));
        }
        try {
            params[name] = parseOptionValue(*spec, std::string_view(item).substr(eq + 1));
        } catch (const InputError& e) {
            throw InputError({}, 0, "--set " + name, e.message());
        }
    }
    return params;
}

void compare(const CompareOptions& o, std::ostream& out)
{
    const auto model = loadAnyModel(o.model);
    const auto cluster = loadCluster(o.cluster);
    ComparisonOptions options;
    options.base = o.partition;
    for (const auto& name : o.algorithms)
        partitionerNamed(name); // unknown names are input errors, not rows
    options.algorithms = o.algorithms;
    const auto rows = compareAlgorithms(model, cluster, options);
    if (o.json) {
        out << json({{"model", model.name}, {"cluster", cluster.name}, {"devices", cluster.deviceCount()},
                        {"rows", comparisonJson(rows)}})
                   .dump(2)
            << "\n";
        return;
    }
    out << "model " << model.name << " (" << model.layerCount() << " layers) on " << cluster.name << " ("
        << cluster.deviceCount() << " devices)\n";
    printComparison(out, rows);
}

void advise(const AdviseOptions& o, std::ostream& out)
{
    const auto model = loadAnyModel(o.model);
    const Market market = loadMarket(o.offers);
    for (const auto* list : {&o.algorithms, &o.mixed_algorithms})
        for (const auto& name : *list)
            partitionerNamed(name);
    AdvisorRequest request {model, market};
    request.samples = o.samples;
    request.budget = o.budget;
    if (o.deadline_hours)
        request.deadline_s = *o.deadline_hours * 3600.0;
    request.algorithms = o.algorithms;
    request.mixed_algorithms = o.mixed_algorithms;
    request.mixes = !o.no_mixes;
    request.max_devices = o.max_devices;
    request.base = o.partition;
    const auto result = pw::planner::advise(request);
    if (result.allocations.empty())
        throw InputError("advise: "
            + (result.diagnostics.empty() ? std::string("no allocation") : result.diagnostics.back().message));
    const int top = std::max(1, std::min<int>(o.top, static_cast<int>(result.allocations.size())));
    if (o.json) {
        out << adviceJson(result, top).dump(2) << "\n";
        return;
    }
    printDiagnostics(out, result.diagnostics);
    printAdvice(out, result, top, o.samples);
}

void listAlgorithms(bool asJson, std::ostream& out)
{
    json list = json::array();
    for (const auto* p : partitioners()) {
        json opts = json::array();
        for (const auto& s : p->options())
            opts.push_back({{"name", s.name}, {"type", describeType(s)}, {"default", s.default_value},
                {"description", s.description}});
        list.push_back({{"name", p->name()}, {"description", p->description()}, {"options", opts}});
    }
    if (asJson) {
        out << list.dump(2) << "\n";
        return;
    }
    for (const auto& a : list) {
        out << a["name"].get<std::string>() << ": " << a["description"].get<std::string>() << "\n";
        for (const auto& o : a["options"]) {
            out << "    --set " << o["name"].get<std::string>() << "=<" << o["type"].get<std::string>() << ">";
            out << "  (default " << (o["default"].is_null() ? std::string("auto") : o["default"].dump()) << ")\n";
            out << "        " << o["description"].get<std::string>() << "\n";
        }
    }
}

void simulate(const SimulateOptions& o, std::ostream& out)
{
    Plan plan = loadPlan(o.plan);
    SimulationResult sim;
    try {
        sim = predict(plan, !o.trace.empty(), nullptr, o.costs);
    } catch (const InputError& e) {
        throw inPlanFile(e, o.plan);
    }
    if (!o.trace.empty())
        writeChromeTraceFile(o.trace, sim.timeline);
    if (o.json) {
        auto j = metricsJson(plan, sim);
        if (!o.costs.empty())
            j["costs"] = o.costs;
        out << j.dump(2) << "\n";
    } else {
        printPlanSummary(out, plan, sim);
        if (!o.costs.empty())
            out << "predicted with the calibrated costs of " << o.costs << "\n";
    }
    if (auto problem = memoryProblem(plan, sim); !problem.empty())
        throw DoesNotFit(o.plan, 0, "", problem);
}

namespace {

/// The files another runtime loads, into the directory o.output (made when missing; nothing is written when the
/// runtime cannot express the plan), and what the user must know about them.
void exportForRuntime(const PlanExporter& exporter, const Plan& plan, const ExportOptions& o, std::ostream& out)
{
    PlanExport result;
    try {
        result = exporter.write(plan);
    } catch (const InputError& e) {
        throw inPlanFile(e, o.plan);
    }
    const auto written = writePlanExport(result, o.output);
    json files = json::array();
    for (std::size_t i = 0; i < written.size(); ++i)
        files.push_back({{"name", written[i]}, {"bytes", result.files[i].text.size()}});
    if (o.json) {
        out << json {{"format", o.format}, {"output", o.output}, {"files", files}, {"notes", result.notes}}.dump(2)
            << "\n";
        return;
    }
    for (const std::string& path : written)
        out << "wrote " << path << "\n";
    for (const std::string& note : result.notes)
        out << "note: " << note << "\n";
}

} // namespace

void exportPlan(const ExportOptions& o, std::ostream& out)
{
    Plan plan = loadPlan(o.plan);
    if (const PlanExporter* exporter = findPlanExporter(o.format)) {
        exportForRuntime(*exporter, plan, o, out);
        return;
    }
    if (o.format == "graph-txt") {
        std::ostringstream text;
        writeGraphTxt(text, plan.model, &plan);
        writeText(o.output, text.str());
    } else {
        Schedule schedule;
        SimulationResult sim;
        try {
            sim = predict(plan, o.format == "chrome-trace", &schedule);
        } catch (const InputError& e) {
            throw inPlanFile(e, o.plan);
        }
        if (o.format == "chrome-trace")
            writeChromeTraceFile(o.output, sim.timeline);
        else if (o.format == "actions-csv")
            writeText(o.output, actionsCsv(schedule));
        else
            writeJsonFile(o.output, toJson(schedule));
    }
    if (o.json)
        out << json {{"format", o.format}, {"output", o.output}, {"bytes", std::filesystem::file_size(o.output)}}.dump(
            2)
            << "\n";
    else
        out << "wrote " << o.output << "\n";
}

} // namespace pw::cli
