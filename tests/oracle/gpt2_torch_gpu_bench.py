#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch's GPT-2 training speed on a GPU: the baseline of tests/bench/bench_gpu_train.cpp.

llm.c's GPT-2 (layers, channels and heads as given; vocabulary 50257 padded to 50304 in the embedding, the head
tied to it), bf16 autocast with fp32 parameters, torch.optim.AdamW(fused=True) with weight decay on the 2-D
parameters, F.scaled_dot_product_attention(is_causal=True) (flash attention), random tokens. Trains --steps timed
steps after --warmup untimed ones, eagerly and then under torch.compile (whose compilation the warm-up absorbs and
is reported apart), each timed with CUDA events around the timed steps, and prints one JSON object:
{"torch": version, "gpu": name, "batch": B, "seq": T, "eager": {"tokens_per_s", "step_ms", "losses"},
"compile": {"tokens_per_s", "step_ms", "compile_s", "losses"}} (a mode that failed holds {"error": why}).
The model is written out here, sharing no code with the engine nor with gpt2_torch.py (the CPU oracle).
"""
import argparse
import json
import math
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.attproj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attproj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt2(nn.Module):
    def __init__(self, L, C, NH, V, Vp, T):
        super().__init__()
        self.V = V
        self.wte = nn.Embedding(Vp, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C)
        # GPT-2's initialisation: N(0, 0.02), the residual projections scaled by 1/sqrt(2 L).
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)

    def forward(self, tokens, targets):
        T = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(T, device=tokens.device))
        for block in self.blocks:
            x = block(x)
        logits = self.lnf(x) @ self.wte.weight.T  # the tied head over the padded vocabulary
        logits = logits[..., : self.V]  # the padding columns take no part in the loss
        return F.cross_entropy(logits.reshape(-1, self.V), targets.reshape(-1))  # fp32 under autocast


def measure(args, compiled):
    torch.manual_seed(args.seed)
    model = Gpt2(args.layers, args.channels, args.heads, args.vocab, args.padded_vocab, args.seq).cuda()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                                  lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_model = torch.compile(model) if compiled else model
    generator = torch.Generator(device="cuda").manual_seed(args.seed)
    rows = args.batch
    losses = []

    def step():
        data = torch.randint(0, args.vocab, (rows, args.seq + 1), device="cuda", generator=generator)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = step_model(data[:, :-1], data[:, 1:])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    t0 = time.perf_counter()
    for _ in range(args.warmup):
        losses.append(step())
    torch.cuda.synchronize()
    warmup_s = time.perf_counter() - t0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(args.steps):
        losses.append(step())
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1e3
    report = {
        "tokens_per_s": args.steps * rows * args.seq / seconds,
        "step_ms": seconds / args.steps * 1e3,
        "peak_bytes": torch.cuda.max_memory_allocated(),
        "losses": [float(x) for x in losses],
    }
    if compiled:
        report["compile_s"] = warmup_s  # compilation happens in the warm-up steps
    del model, optimizer, step_model
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--channels", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--padded-vocab", type=int, default=50304)
    parser.add_argument("--modes", default="eager,compile", help="comma-separated: eager, compile")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA device visible to PyTorch")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "batch": args.batch, "seq": args.seq}
    for mode in args.modes.split(","):
        try:
            out[mode] = measure(args, compiled=(mode == "compile"))
        except Exception as e:  # one mode failing (e.g. out of memory) still reports the other
            traceback.print_exc(file=sys.stderr)
            out[mode] = {"error": f"{type(e).__name__}: {e}"}
            torch.cuda.empty_cache()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
