# Pipewright plan of gpt-356M (l=24, h=1024, a=16, s=1024) (26 layers) by uniform: schedule 1f1b, 4 pipeline stages, tensor parallel 1, data parallel 2 = 8 H100; 4 microbatches of 4 per step on each replica (32 samples per step), bf16
"""The plan's stages as a DeepSpeed PipelineModule partition.

DeepSpeed cuts a PipelineModule's list of layers at PARTS: stage k builds layers PARTS[k] to
PARTS[k + 1] - 1. That list must hold the profile's layers in this order (LAYERS). DeepSpeed's own
partition methods cannot give an arbitrary split: build PlannedPipelineModule(layers, num_stages=NUM_STAGES, ...)
instead of PipelineModule, with ds_config.json beside this file.
"""

NUM_STAGES = 4
PARTS = [0, 7, 14, 20, 26]
LAYERS = [
    "embedding",
    "transformer_1",
    "transformer_2",
    "transformer_3",
    "transformer_4",
    "transformer_5",
    "transformer_6",
    "transformer_7",
    "transformer_8",
    "transformer_9",
    "transformer_10",
    "transformer_11",
    "transformer_12",
    "transformer_13",
    "transformer_14",
    "transformer_15",
    "transformer_16",
    "transformer_17",
    "transformer_18",
    "transformer_19",
    "transformer_20",
    "transformer_21",
    "transformer_22",
    "transformer_23",
    "transformer_24",
    "head",
]
# PipelineModule(activation_checkpoint_interval=...): 1 recomputes every layer's activations in the backward pass.
ACTIVATION_CHECKPOINT_INTERVAL = 0

try:
    from deepspeed.pipe import PipelineModule
except ImportError:  # the numbers above are of use without DeepSpeed too
    PipelineModule = None

if PipelineModule is not None:

    class PlannedPipelineModule(PipelineModule):
        """A PipelineModule whose stages are the plan's (PARTS) whatever partition_method says."""

        def _partition_layers(self, method="uniform"):
            if len(self._layer_specs) != PARTS[-1]:
                raise ValueError(
                    f"the plan cuts {PARTS[-1]} layers, the module has {len(self._layer_specs)}"
                )
            stages = self._topo.get_dim("pipe")
            if stages != NUM_STAGES:
                raise ValueError(f"the plan has {NUM_STAGES} stages, the module {stages}")
            stage = self._topo.get_coord(self.global_rank).pipe
            self.parts = list(PARTS)
            self._set_bounds(start=self.parts[stage], stop=self.parts[stage + 1])
