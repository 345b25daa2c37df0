#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""An independent Llama training oracle in PyTorch, for the engine's tests (tests/engine/test_llama_oracle.cpp).

Reads a safetensors checkpoint with Hugging Face's Llama tensor names (parsed here: an 8-byte header length, a JSON
header, raw little-endian data) and an llm.c token file (16- or 32-bit ids), trains with the engine's data
contract (engine/data.h), gradient accumulation over m microbatches and torch.optim.AdamW (weight decay on the 2-D
parameters only, constant learning rate), and prints {"losses": [...], "torch": version, "python": version}.
The model is transformers' LlamaForCausalLM written out here without sharing any code with the engine: RMSNorm,
rotary embeddings in the rotate_half convention (with Llama 3's frequency scaling when given), grouped-query
attention with an explicit masked softmax, a SwiGLU MLP, no biases (Qwen2's on q, k, v with --qkv-bias), an untied
head unless --tied. --save FILE writes the trained parameters back as safetensors (float32).
"""
import argparse
import json
import math
import platform
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

TOKENS16, TOKENS32 = (20240520, 1), (20240801, 7)
DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "F64": np.dtype("<f8")}


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        raw = data[begin:end]
        if e["dtype"] == "BF16":
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            values = bits.view(np.float32)
        else:
            values = np.frombuffer(raw, dtype=DTYPES[e["dtype"]]).astype(np.float64)
        tensors[name] = values.reshape(e["shape"])
    return tensors


def write_safetensors(path, tensors):
    header, blobs, at = {}, [], 0
    for name, t in tensors.items():
        blob = t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def read_tokens(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype="<i4")
        body = f.read()
    kind = (int(header[0]), int(header[1]))
    if kind not in (TOKENS16, TOKENS32):
        sys.exit(f"{path}: not an llm.c token file (magic {header[0]}, version {header[1]})")
    tokens = np.frombuffer(body, dtype="<u2" if kind == TOKENS16 else "<u4")
    if header[2] != tokens.size:
        sys.exit(f"{path}: header says {header[2]} tokens, the file holds {tokens.size}")
    return tokens.astype(np.int64)


def inverse_frequencies(hs, theta, factor, low, high, original):
    """transformers' default rotary frequencies, and _compute_llama3_parameters' rescaling when factor > 0."""
    inv = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
    if factor <= 0:
        return inv
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > original / low, inv / factor, inv)
    smooth = (original / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= original / high) & (wavelen <= original / low)
    return torch.where(medium, smoothed, scaled)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def loss_of(cfg, p, inputs, targets):
    B, T = inputs.shape
    NH, KV, C = cfg["heads"], cfg["kv_heads"], cfg["hidden"]
    hs = C // NH
    angles = torch.arange(T, dtype=torch.float64)[:, None] * cfg["inv_freq"][None, :]
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos().to(cfg["dtype"]), emb.sin().to(cfg["dtype"])
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    x = p["model.embed_tokens.weight"][inputs]
    for l in range(cfg["layers"]):
        a = f"model.layers.{l}."
        h = rms_norm(x, p[a + "input_layernorm.weight"], cfg["eps"])
        q, k, v = (h @ p[a + f"self_attn.{n}_proj.weight"].T for n in "qkv")
        if cfg["qkv_bias"]:
            q, k, v = (t + p[a + f"self_attn.{n}_proj.bias"] for t, n in zip((q, k, v), "qkv"))
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, KV, hs).transpose(1, 2)
        v = v.view(B, T, KV, hs).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(NH // KV, dim=1), v.repeat_interleave(NH // KV, dim=1)  # query head h: kv h / g
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p[a + "self_attn.o_proj.weight"].T
        h = rms_norm(x, p[a + "post_attention_layernorm.weight"], cfg["eps"])
        gate, up = h @ p[a + "mlp.gate_proj.weight"].T, h @ p[a + "mlp.up_proj.weight"].T
        x = x + (F.silu(gate) * up) @ p[a + "mlp.down_proj.weight"].T
    x = rms_norm(x, p["model.norm.weight"], cfg["eps"])
    head = p["model.embed_tokens.weight"] if cfg["tied"] else p["lm_head.weight"]
    logits = x @ head.T
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def step_rows(tokens, step, m, b, T):
    """The data contract: step k's window of m b T + 1 tokens starts at k (m b T + 1), wrapping at the end."""
    window = m * b * T + 1
    positions = (step * window + np.arange(window)) % tokens.size
    w = tokens[positions]
    rows = np.arange(m * b)[:, None] * T + np.arange(T)[None, :]
    return torch.from_numpy(w[rows]), torch.from_numpy(w[rows + 1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--tokens", required=True)
    for name in ("layers", "hidden", "heads", "kv-heads", "microbatches", "batch", "seq", "steps"):
        ap.add_argument(f"--{name}", type=int, required=True)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--eps", type=float, default=1e-5)
    ap.add_argument("--theta", type=float, default=10000.0)
    ap.add_argument("--rope-factor", type=float, default=0.0)
    ap.add_argument("--rope-low", type=float, default=1.0)
    ap.add_argument("--rope-high", type=float, default=4.0)
    ap.add_argument("--rope-original", type=int, default=8192)
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--qkv-bias", action="store_true")
    ap.add_argument("--float64", action="store_true")
    ap.add_argument("--save")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dtype = torch.float64 if args.float64 else torch.float32
    hs = args.hidden // args.heads
    cfg = dict(layers=args.layers, hidden=args.hidden, heads=args.heads, kv_heads=args.kv_heads, eps=args.eps,
               tied=args.tied, qkv_bias=args.qkv_bias, dtype=dtype,
               inv_freq=inverse_frequencies(hs, args.theta, args.rope_factor, args.rope_low, args.rope_high,
                                            args.rope_original))
    params = {k: torch.nn.Parameter(torch.tensor(v, dtype=dtype)) for k, v in read_safetensors(args.checkpoint).items()}
    tokens = read_tokens(args.tokens)
    vocab = params["model.embed_tokens.weight"].shape[0]
    if tokens.max() >= vocab:
        sys.exit(f"{args.tokens}: token {tokens.max()} is outside the vocabulary {vocab}")
    every = list(params.values())
    groups = [{"params": [t for t in every if t.dim() >= 2], "weight_decay": args.weight_decay},
              {"params": [t for t in every if t.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.999), eps=1e-8)
    m, b = args.microbatches, args.batch
    losses = []
    for step in range(args.steps):
        inputs, targets = step_rows(tokens, step, m, b, args.seq)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for i in range(m):
            loss = loss_of(cfg, params, inputs[i * b:(i + 1) * b], targets[i * b:(i + 1) * b])
            (loss / m).backward()
            total += loss.item()
        losses.append(total / m)
        opt.step()
    if args.save:
        write_safetensors(args.save, params)
    json.dump({"losses": losses, "torch": torch.__version__, "python": platform.python_version()}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
