# Pipewright plan of gpt-174.6B (l=96, h=12288, a=96, s=2048) (98 layers) by uniform: schedule 1f1b, 64 pipeline stages, tensor parallel 1, data parallel 1 = 64 H100; 128 microbatches of 1 per step, bf16, full recomputation
"""The plan's stages as a DeepSpeed PipelineModule partition.

DeepSpeed cuts a PipelineModule's list of layers at PARTS: stage k builds layers PARTS[k] to
PARTS[k + 1] - 1. That list must hold the profile's layers in this order (LAYERS). DeepSpeed's own
partition methods cannot give an arbitrary split: build PlannedPipelineModule(layers, num_stages=NUM_STAGES, ...)
instead of PipelineModule, with ds_config.json beside this file.
"""

NUM_STAGES = 64
PARTS = [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36, 38, 40, 42, 44, 46, 48, 50, 52, 54, 56, 58, 60, 62, 64, 66, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95, 96, 97, 98]
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
    "transformer_25",
    "transformer_26",
    "transformer_27",
    "transformer_28",
    "transformer_29",
    "transformer_30",
    "transformer_31",
    "transformer_32",
    "transformer_33",
    "transformer_34",
    "transformer_35",
    "transformer_36",
    "transformer_37",
    "transformer_38",
    "transformer_39",
    "transformer_40",
    "transformer_41",
    "transformer_42",
    "transformer_43",
    "transformer_44",
    "transformer_45",
    "transformer_46",
    "transformer_47",
    "transformer_48",
    "transformer_49",
    "transformer_50",
    "transformer_51",
    "transformer_52",
    "transformer_53",
    "transformer_54",
    "transformer_55",
    "transformer_56",
    "transformer_57",
    "transformer_58",
    "transformer_59",
    "transformer_60",
    "transformer_61",
    "transformer_62",
    "transformer_63",
    "transformer_64",
    "transformer_65",
    "transformer_66",
    "transformer_67",
    "transformer_68",
    "transformer_69",
    "transformer_70",
    "transformer_71",
    "transformer_72",
    "transformer_73",
    "transformer_74",
    "transformer_75",
    "transformer_76",
    "transformer_77",
    "transformer_78",
    "transformer_79",
    "transformer_80",
    "transformer_81",
    "transformer_82",
    "transformer_83",
    "transformer_84",
    "transformer_85",
    "transformer_86",
    "transformer_87",
    "transformer_88",
    "transformer_89",
    "transformer_90",
    "transformer_91",
    "transformer_92",
    "transformer_93",
    "transformer_94",
    "transformer_95",
    "transformer_96",
    "head",
]
# PipelineModule(activation_checkpoint_interval=...): 1 recomputes every layer's activations in the backward pass.
ACTIVATION_CHECKPOINT_INTERVAL = 1

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
