// SPDX-License-Identifier: MIT
// torchtitan: the schedule as torch.distributed.pipelining's CSV (the compute_only form that
// _PipelineScheduleRuntime._load_csv reads: one row per pipeline rank, actions {stage}{F|I|B|W}{microbatch}, an F&B
// pair of DualPipeV as ({stage}F{microbatch};{stage}B{microbatch})OVERLAP_F_B) and the
// TOML fragment that points torchtitan at it and cuts the model by module names.
#include <algorithm>
#include <set>
#include <sstream>

#include "../errors.h"
#include "../schedule/traits.h"
#include "export.h"
#include "export_common.h"

namespace pw::planner::exports {

namespace {

/// torch.distributed.pipelining's letter for a compute action; 0 for the rest (its runtime adds the transfers).
char actionLetter(ActionKind kind)
{
    switch (kind) {
    case ActionKind::Forward:
        return 'F';
    case ActionKind::Backward:
        return 'B'; // full backward: input and weight gradients together
    case ActionKind::BackwardInput:
        return 'I'; // input gradient alone (zero-bubble schedules)
    case ActionKind::BackwardWeight:
        return 'W';
    default:
        return 0;
    }
}

/// torchtitan's module names of a decoder model (its Llama-style models): tok_embeddings, layers.N, norm, output.
std::vector<std::string> moduleNames(LayerRole role, int block)
{
    switch (role) {
    case LayerRole::Embedding:
        return {"tok_embeddings"};
    case LayerRole::Block:
        return {"layers." + std::to_string(block)};
    case LayerRole::Head:
        return {"norm", "output"};
    }
    return {};
}

/// torchtitan's name of a schedule with the plan's stages per rank and their placement: it derives the virtual
/// stage count and which rank holds which stage from it (a loop, or ZBV's V); the CSV then gives the order. V-Half
/// and V-Min have no class in torch: ZBVZeroBubble names their V, the CSV their order.
std::string scheduleName(const Plan& plan, int chunks)
{
    if (plan.schedule.kind == "dualpipev")
        return "DualPipeV";
    if (const auto* traits = findScheduleTraits(plan.schedule.kind); traits && traits->chunks == ChunkRule::V)
        return "ZBVZeroBubble";
    if (plan.schedule.kind == "gpipe" && chunks == 1)
        return "GPipe";
    return chunks == 1 ? "1F1B" : "Interleaved1F1B";
}

/// The model ties its head to its token embedding and the two are on different stages.
bool tiedAcrossStages(const Plan& plan)
{
    return plan.model->tiedWeightBytes() > 0 && plan.stageCount() > 1;
}

class Torchtitan final : public PlanExporter
{
public:
    std::string_view name() const override { return "torchtitan"; }
    std::string_view description() const override
    {
        return "torch.distributed.pipelining schedule CSV (compute_only) and torchtitan's [parallelism] TOML";
    }

    /// torch.distributed.pipelining's stages are modules that share no parameters, and torchtitan refuses weight
    /// tying with pipeline parallelism ("Weight tying is not supported with Pipeline Parallel"): a model whose head
    /// is tied to its token embedding trains them as two copies when they are on different stages, each updated
    /// from its own gradient, with no all-reduce between their stages. Each stage already holds its copy in the
    /// profile (the head layer's weights count the projection), so only the tie goes.
    Plan runsAs(const Plan& plan) const override
    {
        if (!tiedAcrossStages(plan))
            return plan;
        ModelProfile model = *plan.model;
        model.architecture->tied_embeddings = false;
        Plan out = plan;
        out.model = std::move(model);
        return out;
    }

    PlanExport write(const Plan& plan) const override
    {
        const PipelineShape shape = checkExportable(plan, name());
        const auto roles = transformerRoles(*plan.model, name());
        const Schedule schedule = oneStep(plan);

        // One row per pipeline rank: the first replica's device of stage r (its first tensor-parallel rank). Every
        // replica runs the same order on its own microbatches, which torchtitan numbers from 0 on each rank: the
        // plan's microbatches of that replica (0, d, 2d, ... for replica 0) become 0, 1, 2, ...
        std::ostringstream csv;
        for (int rank = 0; rank < shape.depth; ++rank) {
            const auto& actions = schedule.devices.at(static_cast<std::size_t>(plan.stages[rank].devices.front()));
            std::set<int> own;
            for (const Action& a : actions)
                if (actionLetter(a.kind))
                    own.insert(a.microbatch);
            const std::vector<int> ordered(own.begin(), own.end());
            const auto local = [&](int microbatch) {
                return std::lower_bound(ordered.begin(), ordered.end(), microbatch) - ordered.begin();
            };
            bool first = true;
            bool inPair = false; // an F&B pair's forward is written, its backward comes next
            for (const Action& a : actions) {
                const char letter = actionLetter(a.kind);
                if (!letter)
                    continue;
                if (inPair) {
                    csv << ';' << a.stage << letter << local(a.microbatch) << ")OVERLAP_F_B";
                    inPair = false;
                    continue;
                }
                csv << (first ? "" : ",") << (a.overlaps_next ? "(" : "") << a.stage << letter << local(a.microbatch);
                inPair = a.overlaps_next;
                first = false;
            }
            csv << "\n";
        }

        std::ostringstream toml;
        toml << planSummary(plan, shape, "# ");
        toml << "# torchtitan reads the schedule from the CSV (torch.distributed.pipelining's compute_only form: a "
                "row per\n# pipeline rank, actions {stage}{F|B|W}{microbatch}) and cuts the model by module names "
                "(its decoder\n# models' tok_embeddings, layers.N, norm, output). The CSV path is relative to where "
                "torchtitan runs.\n";
        toml << "[parallelism]\n";
        toml << "pipeline_parallel_degree = " << shape.depth << "\n";
        toml << "pipeline_parallel_schedule = \"" << scheduleName(plan, shape.chunks) << "\"\n";
        toml << "pipeline_parallel_schedule_csv = \"schedule.csv\"\n";
        toml << "pipeline_parallel_microbatch_size = " << shape.microbatch_size << "\n";
        toml << "module_fqns_per_model_part = [\n";
        for (const PlanStage& stage : plan.stages) {
            toml << "  [";
            bool first = true;
            for (int layer = stage.first_layer; layer <= stage.last_layer; ++layer)
                for (const auto& module : moduleNames(roles[static_cast<std::size_t>(layer)], layer - 1)) {
                    toml << (first ? "" : ", ") << '"' << module << '"';
                    first = false;
                }
            toml << "],\n";
        }
        toml << "]\n";
        toml << "tensor_parallel_degree = " << shape.tensor << "\n";
        if (shape.context > 1) // torchtitan's ring attention over the sequence dimension
            toml << "context_parallel_degree = " << shape.context << "\n";
        if (plan.schedule.tp_comm_overlap) // torchtitan's counterpart: async TP overlaps the collectives with matmuls
            toml << "enable_async_tensor_parallel = true\n";
        // FSDP is ZeRO stage 3: the replicas shard the weights (torchtitan's data_parallel_shard_degree); it has no
        // stage 2.
        if (plan.schedule.shard_gradients && !plan.schedule.shard_weights)
            throw InputError({}, 0, "/schedule/shard_gradients",
                "torchtitan cannot express this plan: it shards weights, gradients and optimizer state together "
                "(FSDP, ZeRO stage 3) or replicates them; the plan shards gradients without weights (stage 2)");
        // HSDP: FSDP inside groups of s gradient replicas (torchtitan's shard mesh spans the context ranks too: its
        // shard degree is s / c), replicated across the groups.
        const int gradientReplicas = shape.data * shape.context;
        const int shardGroup = shardGroupSize(plan.schedule, gradientReplicas);
        if (plan.schedule.shard_weights && shardGroup % shape.context != 0)
            throw InputError({}, 0, "/schedule/shard_group",
                "torchtitan cannot express this plan: its FSDP groups span every context rank of a replica; the "
                "plan's shard group of "
                    + std::to_string(shardGroup) + " is not a multiple of context_parallel "
                    + std::to_string(shape.context));
        if (plan.schedule.shard_weights)
            toml << "data_parallel_replicate_degree = " << gradientReplicas / shardGroup
                 << "\ndata_parallel_shard_degree = " << shardGroup / shape.context << "\n\n";
        else
            toml << "data_parallel_replicate_degree = " << shape.data << "\n\n";
        toml << "[training]\n";
        toml << "local_batch_size = " << shape.microbatch_size * shape.microbatches << "\n";
        if (plan.model->architecture)
            toml << "seq_len = " << plan.model->architecture->sequence << "\n";
        toml << "mixed_precision_param = \"" << (shape.precision == "fp32" ? "float32" : "bfloat16") << "\"\n\n";
        if (shape.precision == "fp8") { // torchao's Float8Linear in place of every nn.Linear but the output's
            toml << "[model]\nconverters = [\"float8\"]\n\n";
            if (plan.schedule.shard_weights)
                toml << "[float8]\nenable_fsdp_float8_all_gather = true\n\n";
        }
        toml << "[activation_checkpoint]\n";
        toml << "mode = \"" << planner::name(plan.schedule.recompute) << "\"\n";
        if (plan.schedule.recompute == Recompute::Selective)
            toml << "selective_ac_option = \"op\"\n"; // recompute the attention core's ops, keep the rest

        PlanExport out;
        out.files = {{"schedule.csv", csv.str()}, {"torchtitan.toml", toml.str()}};
        out.notes.push_back("torchtitan derives its stages per rank from pipeline_parallel_schedule (\""
            + scheduleName(plan, shape.chunks) + "\"); the order of actions is the CSV's, "
            + std::to_string(shape.microbatches) + " microbatches per step on each of the " + std::to_string(shape.data)
            + " data-parallel replicas");
        if (plan.schedule.kind == "zb-h1" || plan.schedule.kind == "zb-h2")
            out.notes.push_back("torch.distributed.pipelining names no zero-bubble schedule with one stage per rank: "
                                "\"1F1B\" gives torchtitan the stage count, the CSV the order with its I (input "
                                "gradient) and W (weight gradient) actions");
        if (tiedAcrossStages(plan))
            out.notes.push_back("torchtitan refuses weight tying with pipeline parallelism: the token embedding and "
                                "the head's output projection, tied in the plan, train there as two copies (stage 0 "
                                "and stage "
                + std::to_string(plan.stageCount() - 1)
                + " each update their own; no all-reduce between them), as history import-trace records its runs");
        if (shape.precision == "fp16")
            out.notes.push_back("torchtitan trains in bfloat16 or float32: the fp16 plan is exported as bfloat16");
        if (shape.precision == "fp8")
            out.notes.push_back("torchtitan's float8 converter scales tensor-wise and dynamically (torchao), not with "
                                "Transformer Engine's delayed scaling the plan was timed with");
        return out;
    }
};

} // namespace

const PlanExporter& torchtitanExporter()
{
    static const Torchtitan exporter;
    return exporter;
}

} // namespace pw::planner::exports
