// SPDX-License-Identifier: MIT
// DeepSpeed: the plan's stage boundaries for a PipelineModule (its `parts`: stage k builds layers parts[k] to
// parts[k + 1] - 1 of its layer list) with a PipelineModule subclass that applies them, since DeepSpeed's own
// partition methods ("uniform", "parameters", "type:REGEX") cannot give an arbitrary split; and the ds_config
// fields for the batch: micro-batch per GPU, gradient accumulation (the microbatches), precision, ZeRO stage.
#include <sstream>

#include <nlohmann/json.hpp>

#include "../errors.h"
#include "export.h"
#include "export_common.h"

namespace pw::planner::exports {

namespace {

/// A Python string literal of `text` (JSON's escapes are Python's for these names).
std::string pythonString(const std::string& text)
{
    return nlohmann::json(text).dump();
}

class Deepspeed final : public PlanExporter
{
public:
    std::string_view name() const override { return "deepspeed"; }
    std::string_view description() const override
    {
        return "DeepSpeed PipelineModule stage boundaries (parts) and the ds_config batch fields";
    }

    PlanExport write(const Plan& plan) const override
    {
        const PipelineShape shape = checkExportable(plan, name());
        if (plan.schedule.kind != "1f1b" || shape.chunks != 1)
            throw InputError({}, 0, "/schedule/kind",
                "deepspeed cannot express this plan: DeepSpeed's pipeline engine runs its 1F1B train schedule "
                "(schedule 1f1b, one chunk), not '"
                    + plan.schedule.kind + "' with " + std::to_string(shape.chunks) + " chunk(s)");
        if (shape.tensor > 1)
            throw InputError({}, 0, "/tensor_parallel",
                "deepspeed cannot express this plan: tensor parallelism in a DeepSpeed pipeline needs the model's "
                "own model-parallel topology (Megatron-DeepSpeed); export it as megatron instead");
        if (shape.context > 1)
            throw InputError({}, 0, "/context_parallel",
                "deepspeed cannot express this plan: its pipeline engine has no context parallelism (ring attention "
                "over the sequence; DeepSpeed-Ulysses is another scheme, all-to-all over heads); export it as megatron "
                "or torchtitan instead");
        if (plan.schedule.recompute == Recompute::Selective)
            throw InputError({}, 0, "/schedule/recompute",
                "deepspeed cannot express this plan: a PipelineModule checkpoints whole layers "
                "(activation_checkpoint_interval), not the attention core alone; plan with --recompute=full or none");
        const ModelProfile& model = *plan.model;
        if (model.is_graph)
            throw InputError({}, 0, "/model/is_graph",
                "deepspeed cannot express this plan: a PipelineModule is a sequence of layers and the model is a "
                "graph of operators");

        nlohmann::ordered_json config;
        config["train_batch_size"] = shape.globalBatch();
        config["train_micro_batch_size_per_gpu"] = shape.microbatch_size;
        config["gradient_accumulation_steps"] = shape.microbatches;
        if (shape.precision == "fp8")
            throw InputError({}, 0, "/schedule/precision",
                "deepspeed cannot express this plan: its config has no FP8 training (FP8 products come from "
                "Transformer Engine's layers in the model's code); plan in bf16");
        if (shape.precision == "bf16")
            config["bf16"] = {{"enabled", true}};
        else if (shape.precision == "fp16")
            config["fp16"] = {{"enabled", true}};
        // Megatron's distributed optimizer is ZeRO stage 1, the stage DeepSpeed's pipeline engine supports (its
        // stages 2 and 3 are refused beside pipeline parallelism).
        if (plan.schedule.shard_gradients)
            throw InputError({}, 0,
                plan.schedule.shard_weights ? "/schedule/shard_weights" : "/schedule/shard_gradients",
                "deepspeed cannot express this plan: DeepSpeed's pipeline engine supports ZeRO stage 1 only; the plan "
                "shards its gradients (stage 2) or weights (stage 3)");
        if (shardGroupSize(plan.schedule, shape.data) < shape.data)
            throw InputError({}, 0, "/schedule/shard_group",
                "deepspeed cannot express this plan: its ZeRO stage 1 shards the optimizer over every data-parallel "
                "replica; the plan shards it over groups of "
                    + std::to_string(plan.schedule.shard_group));
        config["zero_optimization"] = {{"stage", plan.schedule.distributed_optimizer ? 1 : 0}};

        std::ostringstream py;
        py << planSummary(plan, shape, "# ");
        py << "\"\"\"The plan's stages as a DeepSpeed PipelineModule partition.\n\n"
              "DeepSpeed cuts a PipelineModule's list of layers at PARTS: stage k builds layers PARTS[k] to\n"
              "PARTS[k + 1] - 1. That list must hold the profile's layers in this order (LAYERS). DeepSpeed's own\n"
              "partition methods cannot give an arbitrary split: build PlannedPipelineModule(layers, "
              "num_stages=NUM_STAGES, ...)\ninstead of PipelineModule, with ds_config.json beside this file.\n"
              "\"\"\"\n\n";
        py << "NUM_STAGES = " << shape.depth << "\n";
        py << "PARTS = [";
        for (const PlanStage& s : plan.stages)
            py << s.first_layer << ", ";
        py << model.layerCount() << "]\n";
        py << "LAYERS = [\n";
        for (const Layer& layer : model.layers)
            py << "    " << pythonString(layer.name) << ",\n";
        py << "]\n";
        py << "# PipelineModule(activation_checkpoint_interval=...): 1 recomputes every layer's activations in the "
              "backward pass.\n";
        py << "ACTIVATION_CHECKPOINT_INTERVAL = " << (plan.schedule.recompute == Recompute::Full ? 1 : 0) << "\n\n";
        py << "try:\n"
              "    from deepspeed.pipe import PipelineModule\n"
              "except ImportError:  # the numbers above are of use without DeepSpeed too\n"
              "    PipelineModule = None\n\n"
              "if PipelineModule is not None:\n\n"
              "    class PlannedPipelineModule(PipelineModule):\n"
              "        \"\"\"A PipelineModule whose stages are the plan's (PARTS) whatever partition_method "
              "says.\"\"\"\n\n"
              "        def _partition_layers(self, method=\"uniform\"):\n"
              "            if len(self._layer_specs) != PARTS[-1]:\n"
              "                raise ValueError(\n"
              "                    f\"the plan cuts {PARTS[-1]} layers, the module has {len(self._layer_specs)}\"\n"
              "                )\n"
              "            stages = self._topo.get_dim(\"pipe\")\n"
              "            if stages != NUM_STAGES:\n"
              "                raise ValueError(f\"the plan has {NUM_STAGES} stages, the module {stages}\")\n"
              "            stage = self._topo.get_coord(self.global_rank).pipe\n"
              "            self.parts = list(PARTS)\n"
              "            self._set_bounds(start=self.parts[stage], stop=self.parts[stage + 1])\n";

        PlanExport out;
        out.files = {{"ds_config.json", config.dump(2) + "\n"}, {"pipeline_partition.py", py.str()}};
        out.notes.push_back("DeepSpeed takes the data-parallel degree from the world size: run it on "
            + std::to_string(shape.depth) + " x " + std::to_string(shape.data) + " = " + std::to_string(shape.gpus())
            + " GPUs");
        out.notes.push_back("PlannedPipelineModule overrides PipelineModule._partition_layers, a DeepSpeed internal");
        return out;
    }
};

} // namespace

const PlanExporter& deepspeedExporter()
{
    static const Deepspeed exporter;
    return exporter;
}

} // namespace pw::planner::exports
