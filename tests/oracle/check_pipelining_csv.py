# SPDX-License-Identifier: MIT
"""Checks a schedule CSV of `pipewright-cli export --format torchtitan` with torch.distributed.pipelining's own
code: its parser (_Action.from_str, as _load_csv reads a compute_only CSV), its validator (_validate_schedule: every
stage's F, B or I + W of every microbatch, in order, each stage on one rank), and its lowering to sends and receives
(_add_send_recv) followed by its dry run (_simulate_comms_compute), which raises on a deadlock.

usage: check_pipelining_csv.py CSV RANKS STAGES MICROBATCHES
       check_pipelining_csv.py CSV...      (each CSV's ranks, stages and microbatches read from its cells: its rows,
                                            and the distinct stage and microbatch numbers; one verdict line per CSV)
Exit status 0 and, last, one line "ok: ..." per schedule when PyTorch accepts it; 3 when torch.distributed.pipelining
cannot be imported (PyTorch older than 2.4); 1 with PyTorch's error otherwise (after every CSV was tried).
"""
import csv
import re
import sys

try:
    from torch.distributed.pipelining import schedules
except ImportError as e:
    print(f"torch.distributed.pipelining is not importable: {e}")
    sys.exit(3)


CELL = re.compile(r"(\d+)[FIBW](\d+)")


def shape(path):
    """(ranks, stages, microbatches) as the CSV's cells say: one row per rank, every stage and microbatch named."""
    stages, microbatches, ranks = set(), set(), 0
    with open(path, newline="") as f:
        for row in csv.reader(f):
            ranks += 1
            for cell in row:
                for stage, mb in CELL.findall(cell):
                    stages.add(int(stage))
                    microbatches.add(int(mb))
    return ranks, len(stages), len(microbatches)


def check(path, ranks, stages, microbatches):
    actions = {}
    with open(path, newline="") as f:
        for rank, row in enumerate(csv.reader(f)):
            actions[rank] = [schedules._Action.from_str(cell) for cell in row]
    count = sum(len(v) for v in actions.values())  # before the lowering, which consumes the lists
    stage_to_rank = schedules._validate_schedule(actions, ranks, stages, microbatches)
    lowered = schedules._add_send_recv(actions, stage_to_rank=lambda s: stage_to_rank[s], num_stages=stages)
    simulated = schedules._simulate_comms_compute(lowered, lambda s: stage_to_rank[s], stages)
    steps = max(len(v) for v in simulated.values())
    print(f"ok: {count} compute actions on {ranks} ranks, {stages} stages, {microbatches} microbatches; "
          f"stage->rank {dict(sorted(stage_to_rank.items()))}; lowered with sends and receives, dry run in {steps} steps"
          f" ({path})")


def main():
    args = sys.argv[1:]
    if len(args) == 4 and all(a.isdigit() for a in args[1:]):
        jobs = [(args[0], int(args[1]), int(args[2]), int(args[3]))]
    elif args and not any(a.isdigit() for a in args):
        jobs = [(path, *shape(path)) for path in args]
    else:
        print(__doc__)
        return 2
    status = 0
    for job in jobs:
        try:
            check(*job)
        except Exception as e:  # PyTorch's own message is the finding
            print(f"PyTorch refused the schedule {job[0]}: {type(e).__name__}: {e}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
