#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""An independent GPT-2 training oracle in PyTorch, for the engine's tests (tests/engine/test_torch_oracle.cpp).

Reads an llm.c fp32 checkpoint (version 3) and an llm.c token file, trains with the engine's data contract
(engine/data.h), gradient accumulation over m microbatches and torch.optim.AdamW (weight decay on the 2-D
parameters only, constant learning rate), and prints {"losses": [...], "torch": version, "python": version}: each
step's mean loss before its update, and what computed them (recorded beside the golden losses).
The model is llm.c's / PyTorch's GPT-2, written out here without sharing any code with the engine.
"""
import argparse
import json
import math
import platform
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

CHECKPOINT_MAGIC, TOKENS_MAGIC = 20240326, 20240520


def read_checkpoint(path, dtype):
    """Header (maxT, V, L, NH, C, Vp) and the parameters: whole-model tensors by name, per-block ones in `blocks`."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype="<i4")
        data = np.frombuffer(f.read(), dtype="<f4")
    if header[0] != CHECKPOINT_MAGIC or header[1] != 3:
        sys.exit(f"{path}: not an llm.c fp32 checkpoint (magic {header[0]}, version {header[1]})")
    maxT, V, L, NH, C, Vp = (int(x) for x in header[2:8])
    layout = [("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)), ("qkvw", (L, 3 * C, C)),
              ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)), ("attprojb", (L, C)), ("ln2w", (L, C)),
              ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)), ("fcprojw", (L, C, 4 * C)),
              ("fcprojb", (L, C)), ("lnfw", (C,)), ("lnfb", (C,))]
    tensors, offset = {}, 0
    for name, shape in layout:
        n = math.prod(shape)
        tensors[name] = torch.tensor(data[offset:offset + n].reshape(shape), dtype=dtype)
        offset += n
    if offset != data.size:
        sys.exit(f"{path}: holds {data.size} parameters, its header describes {offset}")
    param = lambda t: torch.nn.Parameter(t.clone())  # noqa: E731
    whole = {k: param(tensors[k]) for k in ("wte", "wpe", "lnfw", "lnfb")}
    per_block = [k for k, _ in layout if k not in whole]
    blocks = [{k: param(tensors[k][l]) for k in per_block} for l in range(L)]  # PyTorch's per-layer parameters
    return dict(maxT=maxT, V=V, L=L, NH=NH, C=C, Vp=Vp), whole, blocks


def read_tokens(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype="<i4")
        tokens = np.frombuffer(f.read(), dtype="<u2")
    if header[0] != TOKENS_MAGIC or header[1] != 1 or header[2] != tokens.size:
        sys.exit(f"{path}: not an llm.c token file (magic {header[0]}, version {header[1]}, count {header[2]})")
    return tokens.astype(np.int64)


def attention(h, p, NH):
    """Causal self-attention with an explicit masked softmax; qkv rows: all of q, then k, then v."""
    B, T, C = h.shape
    hs = C // NH
    qkv = h @ p["qkvw"].T + p["qkvb"]
    q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in qkv.split(C, dim=2))  # (B, NH, T, hs)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    att = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, C)
    return y @ p["attprojw"].T + p["attprojb"]


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_fused(x):
    return F.gelu(x, approximate="tanh")  # PyTorch's own kernel (--fused): the speed baseline's choice


def loss_of(cfg, whole, blocks, inputs, targets, gelu=gelu_tanh):
    """Mean cross-entropy of GPT-2 over inputs/targets (B, T)."""
    C, V, eps = cfg["C"], cfg["V"], 1e-5
    T = inputs.shape[1]
    x = whole["wte"][inputs] + whole["wpe"][:T]
    for p in blocks:
        x = x + attention(F.layer_norm(x, (C,), p["ln1w"], p["ln1b"], eps), p, cfg["NH"])
        h = F.layer_norm(x, (C,), p["ln2w"], p["ln2b"], eps)
        x = x + gelu(h @ p["fcw"].T + p["fcb"]) @ p["fcprojw"].T + p["fcprojb"]
    x = F.layer_norm(x, (C,), whole["lnfw"], whole["lnfb"], eps)
    logits = x @ whole["wte"][:V].T  # tied head; padded rows V..Vp-1 never give logits
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


def step_rows(tokens, step, m, b, T):
    """The data contract: step k's window of m b T + 1 tokens starts at k (m b T + 1), wrapping at the end."""
    window = m * b * T + 1
    positions = (step * window + np.arange(window)) % tokens.size
    w = tokens[positions]
    rows = np.arange(m * b)[:, None] * T + np.arange(T)[None, :]  # (m b, T) offsets into the window
    return torch.from_numpy(w[rows]), torch.from_numpy(w[rows + 1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--microbatches", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--float64", action="store_true", help="compute in float64 (a reference for the fp32 run)")
    ap.add_argument("--fused", action="store_true", help="PyTorch's fused GELU (the benchmark's baseline)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = torch.float64 if args.float64 else torch.float32

    cfg, whole, blocks = read_checkpoint(args.checkpoint, dtype)
    tokens = read_tokens(args.tokens)
    if args.seq > cfg["maxT"]:
        sys.exit(f"--seq {args.seq} exceeds the checkpoint's maxT {cfg['maxT']}")
    if tokens.max() >= cfg["V"]:
        sys.exit(f"{args.tokens}: token {tokens.max()} is outside the vocabulary {cfg['V']}")

    params = list(whole.values()) + [t for p in blocks for t in p.values()]
    groups = [{"params": [t for t in params if t.dim() >= 2], "weight_decay": args.weight_decay},
              {"params": [t for t in params if t.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.999), eps=1e-8)

    m, b = args.microbatches, args.batch
    gelu = gelu_fused if args.fused else gelu_tanh
    losses = []
    started = None  # after the first step: warm-up (allocations, thread pools) is not timed
    for step in range(args.steps):
        if step == 1:
            started = time.perf_counter()
        inputs, targets = step_rows(tokens, step, m, b, args.seq)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for i in range(m):
            loss = loss_of(cfg, whole, blocks, inputs[i * b:(i + 1) * b], targets[i * b:(i + 1) * b], gelu)
            (loss / m).backward()  # gradient accumulation: the step's loss is the microbatches' mean
            total += loss.item()
        losses.append(total / m)
        opt.step()
    report = {"losses": losses, "torch": torch.__version__, "python": platform.python_version()}
    if started is not None:
        seconds = time.perf_counter() - started
        report["seconds_after_first_step"] = seconds
        report["tokens_per_s"] = (args.steps - 1) * m * b * args.seq / seconds
    json.dump(report, sys.stdout)
    print()


if __name__ == "__main__":
    main()
