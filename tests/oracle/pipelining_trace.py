# SPDX-License-Identifier: MIT
"""Writes the PyTorch profiler trace one rank of a torch.distributed.pipelining run of an exported schedule CSV would
write, with real PyTorch: each action of the rank's row, lowered as the runtime lowers it (a receive before an action
whose input comes from another rank, a send after one whose output goes to another rank), inside
record_function("PP:{action}") as _PipelineScheduleRuntime names it, a real matmul for each compute action (an F&B
pair's forward and backward each in their own record_function inside the pair's), and a real AdamW step after each
step (PyTorch names it Optimizer.step#AdamW.step). Single process, no communication: the transfers are their
annotations only.

usage: pipelining_trace.py CSV RANK STEPS OUT
Exit status 3 when torch cannot be imported.
"""
import csv
import re
import sys

try:
    import torch
    from torch.profiler import record_function
except ImportError as e:
    print(f"torch is not importable: {e}")
    sys.exit(3)

CELL = re.compile(r"^(\d+)([FIBW])(\d+)$")
PAIR = re.compile(r"^\(([^;()]+);([^;()]+)\)OVERLAP_F_B$")


def main():
    path, rank, steps, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    stage_rank = {}
    for r, row in enumerate(rows):
        for cell in row:
            for sub in (PAIR.match(cell).groups() if PAIR.match(cell) else (cell,)):
                stage_rank[int(CELL.match(sub).group(1))] = r
    last = max(stage_rank)
    weight = torch.nn.Parameter(torch.randn(64, 64))
    opt = torch.optim.AdamW([weight])

    def compute(cell):
        stage, kind, mb = CELL.match(cell).groups()
        stage = int(stage)
        incoming = (kind == "F" and stage > 0 and stage_rank[stage - 1] != rank) or (
            kind in "BI" and stage < last and stage_rank[stage + 1] != rank)
        if incoming:
            with record_function(f"PP:{stage}RECV_{'F' if kind == 'F' else 'B'}{mb}"):
                pass
        with record_function(f"PP:{cell}"):
            x = torch.randn(64, 64)
            (x @ weight).sum().backward() if kind != "F" else x @ weight
        outgoing = (kind == "F" and stage < last and stage_rank[stage + 1] != rank) or (
            kind in "BI" and stage > 0 and stage_rank[stage - 1] != rank)
        if outgoing:
            with record_function(f"PP:{stage}SEND_{'F' if kind == 'F' else 'B'}{mb}"):
                pass

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            for cell in rows[rank]:
                pair = PAIR.match(cell)
                if pair:
                    with record_function(f"PP:{cell}"):
                        for sub in pair.groups():
                            compute(sub)
                else:
                    compute(cell)
            opt.step()
            opt.zero_grad()
    prof.export_chrome_trace(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
