// SPDX-License-Identifier: MIT
// Megatron-LM: the plan as pretrain_gpt.py's command-line arguments (a bash array to source). An even split is
// Megatron's default (with --num-layers-per-virtual-pipeline-stage when interleaved); any other split is written
// as --pipeline-model-parallel-layout, one segment per virtual stage in Megatron's order (virtual stage s on
// pipeline rank s mod p, as Pipewright's), E for the embedding, t for a transformer layer, L for the head.
#include <sstream>

#include "../errors.h"
#include "export.h"
#include "export_common.h"

namespace pw::planner::exports {

namespace {

/// Whether the plan's split is Megatron's default: every virtual stage L / V transformer layers, the embedding
/// with the first and the head with the last.
bool evenSplit(const Plan& plan, int blocks)
{
    const int stages = plan.stageCount();
    if (blocks % stages != 0)
        return false;
    const int per = blocks / stages;
    for (int s = 0; s < stages; ++s) {
        const int extra = (s == 0 ? 1 : 0) + (s == stages - 1 ? 1 : 0);
        if (plan.stages[s].layerCount() != per + extra)
            return false;
    }
    return true;
}

/// The layout string: for each virtual stage its layers, runs of transformer layers as t*N.
std::string layout(const Plan& plan, const std::vector<LayerRole>& roles)
{
    std::string out;
    for (int s = 0; s < plan.stageCount(); ++s) {
        if (s > 0)
            out += '|';
        int run = 0;
        const auto flush = [&] {
            if (run == 1)
                out += 't';
            else if (run > 1)
                out += "t*" + std::to_string(run);
            run = 0;
        };
        for (int layer = plan.stages[s].first_layer; layer <= plan.stages[s].last_layer; ++layer) {
            const LayerRole role = roles[static_cast<std::size_t>(layer)];
            if (role == LayerRole::Block) {
                ++run;
                continue;
            }
            flush();
            out += role == LayerRole::Embedding ? 'E' : 'L';
        }
        flush();
    }
    return out;
}

class Megatron final : public PlanExporter
{
public:
    std::string_view name() const override { return "megatron"; }
    std::string_view description() const override
    {
        return "Megatron-LM's pretrain_gpt.py arguments (parallel sizes, batch, layout, recomputation)";
    }

    PlanExport write(const Plan& plan) const override
    {
        const PipelineShape shape = checkExportable(plan, name());
        const std::string& kind = plan.schedule.kind;
        if (!((kind == "1f1b" && shape.chunks == 1) || (kind == "interleaved" && shape.chunks > 1)))
            throw InputError({}, 0, "/schedule/kind",
                "megatron cannot express this plan: Megatron-LM runs 1F1B (schedule 1f1b, one chunk) and "
                "interleaved 1F1B (schedule interleaved, chunks > 1), not '"
                    + kind + "' with " + std::to_string(shape.chunks) + " chunk(s)");
        if (plan.schedule.shard_gradients)
            throw InputError({}, 0,
                plan.schedule.shard_weights ? "/schedule/shard_weights" : "/schedule/shard_gradients",
                "megatron cannot express this plan: Megatron-LM's distributed optimizer is ZeRO stage 1; the plan "
                "shards its gradients (stage 2) or weights (stage 3)");
        const auto roles = transformerRoles(*plan.model, name());
        const int blocks = plan.model->layerCount() - 2;
        const bool even = evenSplit(plan, blocks);

        std::vector<std::string> args;
        const auto arg = [&](const std::string& flag, const std::string& value = {}) {
            args.push_back(value.empty() ? flag : flag + " " + value);
        };
        arg("--pipeline-model-parallel-size", std::to_string(shape.depth));
        arg("--tensor-model-parallel-size", std::to_string(shape.tensor));
        if (shape.context > 1)
            arg("--context-parallel-size", std::to_string(shape.context));
        if (!even)
            arg("--pipeline-model-parallel-layout", "\"" + layout(plan, roles) + "\"");
        else if (shape.chunks > 1)
            arg("--num-layers-per-virtual-pipeline-stage", std::to_string(blocks / plan.stageCount()));
        arg("--num-layers", std::to_string(blocks));
        if (const auto& a = plan.model->architecture) {
            arg("--hidden-size", std::to_string(a->hidden));
            arg("--num-attention-heads", std::to_string(a->heads));
            arg("--seq-length", std::to_string(a->sequence));
            arg("--max-position-embeddings", std::to_string(a->sequence));
        }
        arg("--micro-batch-size", std::to_string(shape.microbatch_size));
        arg("--global-batch-size", std::to_string(shape.globalBatch()));
        if (plan.schedule.recompute == Recompute::Full) {
            arg("--recompute-granularity", "full");
            arg("--recompute-method", "uniform");
            arg("--recompute-num-layers", "1");
        } else if (plan.schedule.recompute == Recompute::Selective) {
            arg("--recompute-activations"); // selective: the attention core
        }
        if (plan.schedule.sequence_parallel && plan.tensor_parallel > 1)
            arg("--sequence-parallel");
        if (plan.schedule.tp_comm_overlap)
            arg("--tp-comm-overlap");
        if (plan.schedule.distributed_optimizer)
            arg("--use-distributed-optimizer");
        if (const int g = shape.data * shape.context, s = shardGroupSize(plan.schedule, g);
            plan.schedule.distributed_optimizer && s < g) // HSDP: copies of the sharded optimizer, one per group
            arg("--num-distributed-optimizer-instances", std::to_string(g / s));
        if (plan.schedule.overlap_grad_reduce && shape.data > 1)
            arg("--overlap-grad-reduce");
        if (plan.schedule.overlap_param_gather)
            arg("--overlap-param-gather");
        if (shape.precision == "bf16")
            arg("--bf16");
        else if (shape.precision == "fp8") { // bf16 weights, Transformer Engine's FP8 products (delayed scaling)
            arg("--bf16");
            arg("--fp8-format", "hybrid");
            arg("--fp8-amax-history-len", "1024");
            arg("--fp8-amax-compute-algo", "max");
        } else if (shape.precision == "fp16")
            arg("--fp16");

        std::ostringstream sh;
        sh << planSummary(plan, shape, "# ");
        sh << "# Megatron-LM's arguments for it: `source megatron_args.sh`, then\n"
              "#   torchrun ... pretrain_gpt.py \"${PIPEWRIGHT_MEGATRON_ARGS[@]}\" <data, tokenizer and optimizer "
              "arguments>\n"
              "# Megatron takes the data-parallel degree from the world size: run it on "
           << shape.depth << " x " << shape.tensor << (shape.context > 1 ? " x " + std::to_string(shape.context) : "")
           << " x " << shape.data << " = " << shape.gpus() << " GPUs.\n";
        sh << "PIPEWRIGHT_MEGATRON_ARGS=(\n";
        for (const auto& a : args)
            sh << "  " << a << "\n";
        sh << ")\n";

        PlanExport out;
        out.files = {{"megatron_args.sh", sh.str()}};
        out.notes.push_back(even ? "the split is Megatron's default (" + std::to_string(blocks / plan.stageCount())
                    + " transformer layers per virtual stage)"
                                 : "the split is uneven: --pipeline-model-parallel-layout gives every virtual "
                                   "stage's layers (a Megatron-core feature, 2025 or later)");
        out.notes.push_back("global batch = micro-batch size x microbatches per replica x data-parallel degree = "
            + std::to_string(shape.microbatch_size) + " x " + std::to_string(shape.microbatches) + " x "
            + std::to_string(shape.data));
        return out;
    }
};

} // namespace

const PlanExporter& megatronExporter()
{
    static const Megatron exporter;
    return exporter;
}

} // namespace pw::planner::exports
