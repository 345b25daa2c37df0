# Pipewright plan of gpt-124M (l=12, h=768, a=12, s=1024) (14 layers) by manual: schedule 1f1b, 1 pipeline stage, tensor parallel 1, data parallel 1 = 1 H100; 4 microbatches of 16 per step, bf16
# Megatron-LM's arguments for it: `source megatron_args.sh`, then
#   torchrun ... pretrain_gpt.py "${PIPEWRIGHT_MEGATRON_ARGS[@]}" <data, tokenizer and optimizer arguments>
# Megatron takes the data-parallel degree from the world size: run it on 1 x 1 x 1 = 1 GPUs.
PIPEWRIGHT_MEGATRON_ARGS=(
  --pipeline-model-parallel-size 1
  --tensor-model-parallel-size 1
  --num-layers 12
  --hidden-size 768
  --num-attention-heads 12
  --seq-length 1024
  --max-position-embeddings 1024
  --micro-batch-size 16
  --global-batch-size 64
  --bf16
)
