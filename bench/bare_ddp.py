"""The bare PyTorch DDP loop that bench/gpu_check.py times our trainer against.

Written as a user would write it from PyTorch's DDP and AMP tutorials, nothing more: a
TensorDataset with a DistributedSampler and a DataLoader, DDP, SGD, autocast and, for fp16, a
GradScaler; the loss is read (``loss.item()``, which waits for the device) once every
``--window-steps`` steps, as a user logging it would. The model, data and batch are
our trainer's ``transformer`` task's and the learning rate is the one gpu_check.py gives both loops,
so the two do the same arithmetic.

Run by gpu_check.py under ``torchrun --nproc-per-node 1`` with trainer-image/ on PYTHONPATH; prints
one JSON line per window: ``{"event": "window", "steps": N, "seconds": S}``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from dpjob_trainer.tasks import build_task

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cuda", "cpu"], required=True)
    p.add_argument("--precision", choices=list(DTYPES), required=True)
    p.add_argument("--model-width", type=int, required=True)
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--dataset-size", type=int, required=True)
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--window-steps", type=int, required=True)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])
    cuda = args.device == "cuda"
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", device_id=device if cuda else None)

    task = build_task("transformer", seed=0, dataset_size=args.dataset_size, model_width=args.model_width)
    model = DistributedDataParallel(task.model.to(device), device_ids=[local_rank] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    dtype = DTYPES[args.precision]
    scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "fp16")
    data = TensorDataset(task.dataset.inputs, task.dataset.targets)
    sampler = DistributedSampler(data, seed=0)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, drop_last=True, pin_memory=cuda)

    step, epoch, mark = 0, 0, time.perf_counter()
    while step < args.steps:
        sampler.set_epoch(epoch)
        for inputs, targets in loader:
            inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                loss = task.loss_fn(model(inputs), targets)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            step += 1
            if step % args.window_steps == 0:
                value = loss.item()
                now = time.perf_counter()
                print(json.dumps({"event": "window", "steps": args.window_steps, "seconds": now - mark,
                                  "step": step, "loss": value}), flush=True)
                mark = now
            if step == args.steps:
                break
        epoch += 1
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
