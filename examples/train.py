"""A minimal PyTorch DDP script: a tiny model fit to synthetic data, plain torch, nothing of dpjob.

On a cluster, every rank runs it with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set by the
operator (as torchrun sets them): `dpjob run examples/train.py --replicas 2 --follow -- --epochs 3`.
On one machine: `python examples/train.py` (a world of one) or `torchrun --nproc-per-node 2 examples/train.py`.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Fit a tiny model to synthetic data with DistributedDataParallel.")
    parser.add_argument("--epochs", type=int, default=3, help="passes over the data (default: 3)")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per rank and step (default: 32)")
    parser.add_argument("--lr", type=float, default=0.05, help="learning rate (default: 0.05)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if "WORLD_SIZE" not in os.environ:  # started by hand, without a launcher: a world of one
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    cuda = torch.cuda.is_available()
    dist.init_process_group(backend="nccl" if cuda else "gloo")  # reads RANK, WORLD_SIZE, MASTER_ADDR/PORT
    rank, world_size = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)

    torch.manual_seed(0)  # every rank builds the same data set; the sampler hands each its own share
    features = torch.randn(1024, 16)
    targets = features @ torch.randn(16, 1) + 0.1 * torch.randn(1024, 1)
    data = TensorDataset(features, targets)
    sampler: DistributedSampler[tuple[torch.Tensor, ...]] = DistributedSampler(data, num_replicas=world_size,
                                                                              rank=rank, shuffle=True)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)

    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same one on every rank
        totals = torch.zeros(2, device=device)  # this rank's summed loss and batch count
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = loss_fn(ddp(x), y)
            loss.backward()  # DDP averages the gradients over every rank here
            optimizer.step()
            totals += torch.stack([loss.detach(), torch.ones((), device=device)])
        dist.all_reduce(totals)  # summed over every rank: the epoch's mean loss across the world
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs} loss {(totals[0] / totals[1]).item():.4f} "
                  f"(world size {world_size})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
