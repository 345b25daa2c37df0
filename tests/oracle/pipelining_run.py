# SPDX-License-Identifier: MIT
"""Runs an exported schedule CSV (pipewright-cli export --format torchtitan) with torch.distributed.pipelining's own
runtime (_PipelineScheduleRuntime._load_csv, as torchtitan runs pipeline_parallel_schedule_csv) and writes each rank's
PyTorch profiler trace: the traces `pipewright-cli history import-trace` reads. One process per pipeline rank over
Gloo on this machine (NCCL refuses two ranks on one GPU); each stage a small MLP on the CPU, or on the GPU with --cuda
(both ranks on cuda:0). Gloo carries host tensors only (its send hands the tensor's pointer to a TCP buffer), so with
--cuda the stages are host-side to the runtime and each module computes on the GPU between a copy in and a copy out:
the compute actions' kernels are on the GPU (Kineto's gpu_user_annotation), the transfers on the host. Needs PyTorch
2.4 or later (the GPU machine's 2.11; Debian's 1.13 has no pipelining: exit status 3).

usage: pipelining_run.py CSV MICROBATCHES STEPS OUTDIR [--cuda]
  writes OUTDIR/rank{r}.json and prints one line "ok: ..." per rank
"""
import csv
import os
import re
import sys

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime
except ImportError as e:
    print(f"torch.distributed.pipelining is not importable: {e}")
    sys.exit(3)

CELL = re.compile(r"(\d+)[FIBW]\d+")
WIDTH, BATCH = 256, 8


def stage_ranks(path):
    """stage -> rank, from the cells of each rank's row."""
    out = {}
    with open(path, newline="") as f:
        for rank, row in enumerate(csv.reader(f)):
            for cell in row:
                for stage in CELL.findall(cell):
                    out[int(stage)] = rank
    return out


class OnDevice(torch.nn.Module):
    """`inner` on `device`, behind host tensors at its edges (the copies are in its forward and backward)."""

    def __init__(self, inner, device):
        super().__init__()
        self.inner = inner.to(device)
        self.device = device

    def forward(self, x):
        if x.is_meta:  # the stage's shape inference runs the module on meta tensors, which cannot be copied
            return self.inner(x)
        return self.inner(x.to(self.device)).to("cpu")


def worker(rank, world, path, microbatches, steps, outdir, use_cuda):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    host = torch.device("cpu")
    owner = stage_ranks(path)
    num_stages = len(owner)
    torch.manual_seed(1234)
    stages, params = [], []
    for s in sorted(owner):
        module = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU())
        if use_cuda:
            module = OnDevice(module, torch.device("cuda:0"))
        if owner[s] == rank:
            stages.append(PipelineStage(module, s, num_stages, host))
            params += list(module.parameters())
    schedule = _PipelineScheduleRuntime(stages, microbatches, loss_fn=lambda out, y: ((out - y) ** 2).mean())
    schedule._load_csv(path, format="compute_only")
    opt = torch.optim.AdamW(params, lr=1e-3)
    x = torch.randn(BATCH * microbatches, WIDTH)
    y = torch.randn(BATCH * microbatches, WIDTH)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if use_cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(steps):
            holds_first = any(s.is_first for s in stages)
            holds_last = any(s.is_last for s in stages)
            inputs = (x,) if holds_first else ()  # only the first stage's rank gives inputs, as torch's examples do
            schedule.step(*inputs, target=y if holds_last else None)
            opt.step()
            opt.zero_grad()
    out = os.path.join(outdir, f"rank{rank}.json")
    prof.export_chrome_trace(out)
    print(f"ok: rank {rank} of {world}, stages {[s.stage_index for s in stages]}, {steps} steps -> {out}")
    dist.destroy_process_group()


def main():
    path, microbatches, steps, outdir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    use_cuda = "--cuda" in sys.argv[5:]
    with open(path, newline="") as f:
        world = sum(1 for _ in csv.reader(f))
    os.makedirs(outdir, exist_ok=True)
    mp.spawn(worker, args=(world, path, microbatches, steps, outdir, use_cuda), nprocs=world, join=True)


if __name__ == "__main__":
    main()
