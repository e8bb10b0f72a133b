#!/usr/bin/env python3
"""What an elastic job does at each resize, without PyTorch: gpool's tests run it.

Every replica reads the size it runs at (WORLD_SIZE) and its RANK. Rank 0
keeps a checkpoint (the global step and the samples seen) in DIR: it loads
it at start, saves it every 10 steps and when gpool asks the job to stop
(SIGTERM: a resize or a preemption; the grace period is the time to save).
A global batch of 64 samples is split over the ranks, so a run at another
size goes on from the same step with the same global batch.

    python3 checkpoint_demo.py DIR
"""

import json
import os
import signal
import sys
import time

GLOBAL_BATCH = 64


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    ckpt = os.path.join(sys.argv[1], "checkpoint.json")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    state = {"step": 0, "samples": 0}
    if os.path.exists(ckpt):
        with open(ckpt) as f:
            state = json.load(f)
    print(f"size={world} rank={rank} nnodes={os.environ.get('PET_NNODES', '-')} step={state['step']}", flush=True)

    def save() -> None:
        if rank != 0:
            return
        tmp = ckpt + ".tmp"
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.replace(tmp, ckpt)

    def stop(_signum, _frame) -> None:
        save()
        print(f"rank {rank}: checkpointed at step {state['step']}, exiting for a resize", flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    per_rank = GLOBAL_BATCH // world
    while True:
        time.sleep(0.1)
        state["step"] += 1
        state["samples"] += per_rank * world
        if state["step"] % 10 == 0:
            save()


if __name__ == "__main__":
    sys.exit(main())
