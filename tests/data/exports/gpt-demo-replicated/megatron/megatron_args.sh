# Pipewright plan of gpt-356M (l=24, h=1024, a=16, s=1024) (26 layers) by uniform: schedule 1f1b, 4 pipeline stages, tensor parallel 1, data parallel 2 = 8 H100; 4 microbatches of 4 per step on each replica (32 samples per step), bf16
# Megatron-LM's arguments for it: `source megatron_args.sh`, then
#   torchrun ... pretrain_gpt.py "${PIPEWRIGHT_MEGATRON_ARGS[@]}" <data, tokenizer and optimizer arguments>
# Megatron takes the data-parallel degree from the world size: run it on 4 x 1 x 2 = 8 GPUs.
PIPEWRIGHT_MEGATRON_ARGS=(
  --pipeline-model-parallel-size 4
  --tensor-model-parallel-size 1
  --pipeline-model-parallel-layout "Et*6|t*7|t*6|t*5L"
  --num-layers 24
  --hidden-size 1024
  --num-attention-heads 16
  --seq-length 1024
  --max-position-embeddings 1024
  --micro-batch-size 4
  --global-batch-size 32
  --overlap-grad-reduce
  --bf16
)
