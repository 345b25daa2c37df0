# SPDX-License-Identifier: MIT
"""Checks a schedule CSV of `pipewright-cli export --format torchtitan` with torch.distributed.pipelining's own
code: its parser (_Action.from_str, as _load_csv reads a compute_only CSV), its validator (_validate_schedule: every
stage's F, B or I + W of every microbatch, in order, each stage on one rank), and its lowering to sends and receives
(_add_send_recv) followed by its dry run (_simulate_comms_compute), which raises on a deadlock.

usage: check_pipelining_csv.py CSV RANKS STAGES MICROBATCHES
Exit status 0 and, last, one line "ok: ..." when PyTorch accepts the schedule; 3 when torch.distributed.pipelining cannot
be imported (PyTorch older than 2.4); 1 with PyTorch's error otherwise.
"""
import csv
import sys

try:
    from torch.distributed.pipelining import schedules
except ImportError as e:
    print(f"torch.distributed.pipelining is not importable: {e}")
    sys.exit(3)


def main():
    path, ranks, stages, microbatches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
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
          f"stage->rank {dict(sorted(stage_to_rank.items()))}; lowered with sends and receives, dry run in {steps} steps")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # PyTorch's own message is the finding
        print(f"PyTorch refused the schedule: {type(e).__name__}: {e}")
        sys.exit(1)
