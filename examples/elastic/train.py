#!/usr/bin/env python3
"""An elastic PyTorch DDP job for gpool: resumes from its checkpoint at whatever size it is restarted at.

Submit it (docs/elastic.md):

    gpool submit --replicas 2:8 --gpus 1 --preemptible --grace 60s -- \\
        torchrun train.py --checkpoint /shared/ckpt/run1.pt

gpool starts one torchrun agent per replica and gives each the elastic
flags through torchrun's environment (PET_NNODES=MIN:MAX, PET_NPROC_PER_NODE,
PET_RDZV_BACKEND=c10d, PET_RDZV_ENDPOINT, PET_RDZV_ID, PET_RDZV_CONF). When
the scheduler grows or shrinks the job, every replica gets SIGTERM, rank 0
saves a checkpoint within the grace period, and gpool starts the job again
at the new size; this script then loads the checkpoint and goes on with the
same global batch, split over the new number of workers.
"""

import argparse
import os
import signal

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

GLOBAL_BATCH = 256


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--checkpoint", required=True, help="a path every replica can read (shared storage)")
    p.add_argument("--steps", type=int, default=100_000)
    args = p.parse_args()

    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)

    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    step = 0
    if os.path.exists(args.checkpoint):
        ck = torch.load(args.checkpoint, map_location=device)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step = ck["step"]
    ddp = DDP(model, device_ids=[local] if device.type == "cuda" else None)
    if rank == 0:
        print(f"world size {world}: resuming at step {step}", flush=True)

    stopping = False

    def on_term(_signum, _frame) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)

    data = TensorDataset(torch.randn(65_536, 512), torch.randint(0, 10, (65_536,)))
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=step)
    # The same global batch at every size: each worker takes its share.
    loader = DataLoader(data, batch_size=max(1, GLOBAL_BATCH // world), sampler=sampler, drop_last=True)
    loss_fn = torch.nn.CrossEntropyLoss()
    while step < args.steps and not stopping:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            opt.zero_grad()
            loss_fn(ddp(x), y).backward()
            opt.step()
            step += 1
            # Everyone stops at the same step once any rank was asked to.
            flag = torch.tensor([1.0 if stopping else 0.0], device=device)
            dist.all_reduce(flag)
            if flag.item() > 0 or step >= args.steps:
                stopping = True
                break
    if rank == 0:
        tmp = args.checkpoint + ".tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
        os.replace(tmp, args.checkpoint)
        print(f"checkpointed at step {step} (world size {world})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
