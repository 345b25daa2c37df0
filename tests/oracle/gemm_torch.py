#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# PyTorch's matrix products against a GEMM table the engine measured (pipewright-agent --profile-gemm), in the same
# run on the same GPU (issue 33 item 4): for every (m, n, k) of the table, torch.nn.functional.linear(x, w) with x
# (m x k) and w (n x k) filled uniform in [-1, 1) (the product a Linear layer does, the engine's forward layout
# D = X W^T), timed by CUDA events over back-to-back products (at least 2 ms a timing), the median of --repeats
# timings. Prints each shape's TFLOP/s both ways and their ratio, then the geometric mean, the spread and the
# shapes where the engine is furthest behind; --json writes the same.
#   gemm_torch.py TABLE.json [--repeats 5] [--json OUT]
import argparse
import json
import math
import statistics
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("table")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    import torch

    with open(args.table) as f:
        table = json.load(f)
    if table.get("format") != "pipewright-gemm-table":
        sys.exit(f"{args.table}: not a GEMM table")
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[table.get("dtype", "bf16")]
    torch.backends.cuda.matmul.allow_tf32 = False  # the engine's fp32 products are fp32
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(1234)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rows = []
    for s in table["samples"]:
        m, n, k = s["m"], s["n"], s["k"]
        x = torch.rand((m, k), generator=gen, device=dev, dtype=torch.float32).mul_(2).sub_(1).to(dtype)
        w = torch.rand((n, k), generator=gen, device=dev, dtype=torch.float32).mul_(2).sub_(1).to(dtype)
        out = torch.nn.functional.linear(x, w)
        torch.cuda.synchronize()
        # Back-to-back products: enough of them for a timing of at least 2 ms.
        start.record()
        out = torch.nn.functional.linear(x, w)
        stop.record()
        stop.synchronize()
        count = max(1, math.ceil(2.0 / max(start.elapsed_time(stop), 1e-3)))
        times = []
        for _ in range(args.repeats):
            start.record()
            for _ in range(count):
                torch.nn.functional.linear(x, w)
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / 1e3 / count)
        seconds = statistics.median(times)
        flops = 2.0 * m * n * k
        engine = flops / s["seconds"] / 1e12
        torch_tflops = flops / seconds / 1e12
        rows.append({"m": m, "n": n, "k": k, "engine_tflops": engine, "torch_tflops": torch_tflops,
                     "ratio": engine / torch_tflops})
        del x, w, out
    ratios = [r["ratio"] for r in rows]
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    # The large products (at least 1 GFLOP) are where the time of a training step is.
    large = [r["ratio"] for r in rows if 2.0 * r["m"] * r["n"] * r["k"] >= 1e9]
    print(f"GEMM table ({table.get('library', '?')}, {table.get('dtype')}) against torch {torch.__version__} "
          f"F.linear on {torch.cuda.get_device_name()}: {len(rows)} shapes")
    print(f"{'m':>6} {'n':>6} {'k':>6} {'engine TFLOP/s':>15} {'torch TFLOP/s':>14} {'ratio':>7}")
    for r in rows:
        print(f"{r['m']:>6} {r['n']:>6} {r['k']:>6} {r['engine_tflops']:>15.1f} {r['torch_tflops']:>14.1f} "
              f"{r['ratio']:>7.2f}")
    print(f"engine / torch: geometric mean {geomean:.3f}, min {min(ratios):.2f}, max {max(ratios):.2f}"
          + (f"; products >= 1 GFLOP: geometric mean "
             f"{math.exp(sum(math.log(r) for r in large) / len(large)):.3f} over {len(large)}" if large else ""))
    worst = sorted(rows, key=lambda r: r["ratio"])[:5]
    print("furthest behind: " + ", ".join(f"{r['m']}x{r['n']}x{r['k']} {r['ratio']:.2f}" for r in worst))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "geomean": geomean, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
