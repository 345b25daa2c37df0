# Pipewright plan of gpt-174.6B (l=96, h=12288, a=96, s=2048) (98 layers) by uniform: schedule 1f1b, 64 pipeline stages, tensor parallel 1, data parallel 1 = 64 H100; 128 microbatches of 1 per step, bf16, full recomputation
# Megatron-LM's arguments for it: `source megatron_args.sh`, then
#   torchrun ... pretrain_gpt.py "${PIPEWRIGHT_MEGATRON_ARGS[@]}" <data, tokenizer and optimizer arguments>
# Megatron takes the data-parallel degree from the world size: run it on 64 x 1 x 1 = 64 GPUs.
PIPEWRIGHT_MEGATRON_ARGS=(
  --pipeline-model-parallel-size 64
  --tensor-model-parallel-size 1
  --pipeline-model-parallel-layout "Et|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|L"
  --num-layers 96
  --hidden-size 12288
  --num-attention-heads 96
  --seq-length 2048
  --max-position-embeddings 2048
  --micro-batch-size 1
  --global-batch-size 128
  --recompute-granularity full
  --recompute-method uniform
  --recompute-num-layers 1
  --bf16
)
