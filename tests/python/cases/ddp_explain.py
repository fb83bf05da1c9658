"""Each rank of a data-parallel job (gloo, CPU, under torchrun) explains its step's peak with
memseal.explain and writes it to OUT/rank-N.json; with --uneven, rank r's batch is (r + 1) times
rank 0's, so the ranks' peaks differ.

    python -m torch.distributed.run --standalone --nproc-per-node 2 ddp_explain.py --out DIR --uneven
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import memseal


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--uneven", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = 128 * (rank + 1 if args.uneven else 1)
    inputs, targets = torch.randn(batch, 256), torch.randint(0, 10, (batch,))

    def step(i):
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    peak = memseal.explain(step, steps=3, warmup=1, model=model, optimizer=optimizer)
    with open(os.path.join(args.out, f"rank-{rank}.json"), "w") as file:
        file.write(peak.to_json())
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
