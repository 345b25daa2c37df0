// SPDX-License-Identifier: MIT
// The exporters' registry and the checks they share (export_common.h).
#include "export.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "../errors.h"
#include "../schedule/generator.h"
#include "export_common.h"

namespace pw::planner {

namespace exports {
const PlanExporter& torchtitanExporter();
const PlanExporter& megatronExporter();
const PlanExporter& deepspeedExporter();
} // namespace exports

const std::vector<const PlanExporter*>& planExporters()
{
    static const std::vector<const PlanExporter*> all
        = {&exports::torchtitanExporter(), &exports::megatronExporter(), &exports::deepspeedExporter()};
    return all;
}

const PlanExporter* findPlanExporter(std::string_view name)
{
    for (const PlanExporter* e : planExporters())
        if (e->name() == name)
            return e;
    return nullptr;
}

std::vector<std::string> writePlanExport(const PlanExport& exported, const std::string& directory)
{
    const std::filesystem::path dir(directory);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec || !std::filesystem::is_directory(dir))
        throw InputError(directory, 0, "",
            "cannot make the directory for the export" + (ec ? ": " + ec.message() : ": a file of that name is there"));
    std::vector<std::string> written;
    for (const ExportedFile& f : exported.files) {
        const std::string path = (dir / f.name).string();
        std::ofstream out(path, std::ios::binary);
        out << f.text;
        if (!out.flush())
            throw InputError(path, 0, "", "cannot write the file");
        written.push_back(path);
    }
    return written;
}

namespace exports {

namespace {

[[noreturn]] void refuse(std::string_view runtime, const std::string& field, const std::string& why)
{
    throw InputError({}, 0, field, std::string(runtime) + " cannot express this plan: " + why);
}

} // namespace

PipelineShape checkExportable(const Plan& plan, std::string_view runtime)
{
    if (plan.stages.empty())
        refuse(runtime, "/stages", "it has no stages");
    if (plan.pipelineCount() > 1)
        refuse(runtime, "/stages",
            "it has " + std::to_string(plan.pipelineCount())
                + " independent pipelines (HetPipe's virtual workers); the runtime trains one pipeline, replicated "
                  "alike");
    if (!plan.layer_order.empty())
        refuse(runtime, "/layer_order",
            "its layers run in another order than the profile's; the runtime cuts the model in its own order");
    const ScheduleGenerator* generator = findScheduleGenerator(plan.schedule.kind);
    if (!generator)
        refuse(runtime, "/schedule/kind", "unknown schedule kind '" + plan.schedule.kind + "'");
    const ScheduleTraits& traits = generator->traits();
    if (!traits.synchronous || !traits.flush_per_batch || traits.update_per_backward)
        refuse(runtime, "/schedule/kind",
            "schedule '" + plan.schedule.kind
                + "' is asynchronous (updates without a flush, microbatches on stale weights); the runtime "
                  "runs synchronous schedules only (gpipe, 1f1b, interleaved)");
    if (plan.cluster->deviceCount() == 0)
        refuse(runtime, "/cluster", "its cluster has no devices");
    const Cluster& cluster = *plan.cluster;
    std::set<std::string> types;
    for (const PlanStage& s : plan.stages)
        for (const int d : s.devices)
            types.insert(cluster.typeOf(d).name);
    if (types.size() > 1) {
        std::string names;
        for (const auto& t : types)
            names += (names.empty() ? "" : ", ") + t;
        refuse(runtime, "/cluster/device_types",
            "its devices are of " + std::to_string(types.size()) + " types (" + names
                + "); the runtime gives every stage the same kind of GPU");
    }
    const int replicas = plan.stages.front().replicas();
    for (int s = 1; s < plan.stageCount(); ++s)
        if (plan.stages[s].replicas() != replicas)
            refuse(runtime, "/stages/" + std::to_string(s) + "/devices",
                "stage " + std::to_string(s) + " runs on " + std::to_string(plan.stages[s].replicas())
                    + " devices and stage 0 on " + std::to_string(replicas)
                    + "; the runtime replicates every stage alike (one data-parallel degree)");
    PipelineShape shape;
    shape.chunks = std::max(1, plan.schedule.chunks);
    shape.depth = plan.pipelineDepth();
    shape.tensor = std::max(1, plan.tensor_parallel);
    shape.context = std::max(1, plan.context_parallel);
    shape.data = replicas / (shape.tensor * shape.context);
    // The plan's microbatches are the whole step's, dealt round-robin over the data-parallel replicas (replica k runs
    // k, k + d, ...); the runtimes count a replica's own (gradient accumulation steps, n_microbatches).
    if (plan.schedule.microbatches % shape.data != 0)
        refuse(runtime, "/schedule/microbatches",
            std::to_string(plan.schedule.microbatches) + " microbatches per step do not split evenly over "
                + std::to_string(shape.data)
                + " data-parallel replicas; the runtime gives every replica the same number: plan a multiple of "
                + std::to_string(shape.data));
    shape.microbatches = plan.schedule.microbatches / shape.data;
    shape.microbatch_size
        = plan.schedule.microbatch_size > 0 ? plan.schedule.microbatch_size : plan.model->microbatch_size;
    shape.precision = weightPrecision(plan.schedule, *plan.model);
    shape.device_type = *types.begin();
    return shape;
}

std::vector<LayerRole> transformerRoles(const ModelProfile& model, std::string_view runtime)
{
    const auto notTransformer = [&](int layer, const std::string& why) {
        refuse(runtime, "/model/layers/" + std::to_string(layer) + "/kind",
            why
                + "; the runtime's pipeline cuts a GPT-style transformer (embedding, transformer_layer..., head: "
                  "`profile transformer`)");
    };
    if (model.is_graph)
        refuse(runtime, "/model/is_graph", "its model is a graph of operators, not a chain of transformer layers");
    const int n = model.layerCount();
    if (n < 3)
        notTransformer(0, "the model has " + std::to_string(n) + " layers");
    std::vector<LayerRole> roles(static_cast<std::size_t>(n), LayerRole::Block);
    for (int i = 0; i < n; ++i) {
        const std::string& kind = model.layers[i].kind;
        const std::string want = i == 0 ? "embedding" : i == n - 1 ? "head" : "transformer_layer";
        if (kind != want)
            notTransformer(i,
                "layer " + std::to_string(i) + " ('" + model.layers[i].name + "') is a '" + kind + "', not a '" + want
                    + "'");
        roles[static_cast<std::size_t>(i)] = i == 0 ? LayerRole::Embedding
            : i == n - 1                            ? LayerRole::Head
                                                    : LayerRole::Block;
    }
    return roles;
}

Schedule oneStep(const Plan& plan)
{
    Plan step = plan;
    step.schedule.iterations = 1;
    return generateSchedule(step);
}

std::string planSummary(const Plan& plan, const PipelineShape& shape, std::string_view prefix)
{
    std::ostringstream out;
    out << prefix << "Pipewright plan of " << (plan.model->name.empty() ? "a model" : plan.model->name) << " ("
        << plan.model->layerCount() << " layers)";
    if (!plan.algorithm.empty())
        out << " by " << plan.algorithm;
    out << ": schedule " << plan.schedule.kind << ", " << shape.depth << " pipeline stage"
        << (shape.depth == 1 ? "" : "s");
    if (shape.chunks > 1)
        out << " x " << shape.chunks << " chunks";
    out << ", tensor parallel " << shape.tensor;
    if (shape.context > 1)
        out << ", context parallel " << shape.context;
    out << ", data parallel " << shape.data << " = " << shape.gpus() << " " << shape.device_type << "; "
        << shape.microbatches << " microbatches of " << shape.microbatch_size << " per step"
        << (shape.data > 1 ? " on each replica (" + std::to_string(shape.globalBatch()) + " samples per step)" : "")
        << ", " << shape.precision
        << (plan.schedule.recompute != Recompute::None
                   ? std::string(", ") + name(plan.schedule.recompute) + " recomputation"
                   : std::string())
        << "\n";
    return out.str();
}

std::string number(double value)
{
    if (std::floor(value) == value && std::fabs(value) < 1e15)
        return std::to_string(static_cast<long long>(value));
    std::ostringstream out;
    out.precision(12);
    out << value;
    return out.str();
}

} // namespace exports

} // namespace pw::planner
