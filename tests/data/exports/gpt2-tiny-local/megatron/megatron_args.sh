# Pipewright plan of GPT-2 tiny (4 x 64) (6 layers): schedule 1f1b, 2 pipeline stages, tensor parallel 1, data parallel 1 = 2 cpu; 4 microbatches of 4 per step, fp32
# Megatron-LM's arguments for it: `source megatron_args.sh`, then
#   torchrun ... pretrain_gpt.py "${PIPEWRIGHT_MEGATRON_ARGS[@]}" <data, tokenizer and optimizer arguments>
# Megatron takes the data-parallel degree from the world size: run it on 2 x 1 x 1 = 2 GPUs.
PIPEWRIGHT_MEGATRON_ARGS=(
  --pipeline-model-parallel-size 2
  --tensor-model-parallel-size 1
  --num-layers 4
  --hidden-size 64
  --num-attention-heads 4
  --seq-length 64
  --max-position-embeddings 64
  --micro-batch-size 4
  --global-batch-size 16
)
