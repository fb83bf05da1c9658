"""A small data-parallel training job (DistributedDataParallel over gloo, on the CPU), to run under
torchrun the way such jobs are run, with the memory mistakes distributed jobs make on purpose.

    torchrun --standalone --nproc-per-node 2 examples/scripts/ddp_train.py [--leak rank0|last|all]
    memseal run -- torchrun --standalone --nproc-per-node 2 examples/scripts/ddp_train.py --leak rank0

--leak rank0   rank 0 keeps each step's loss, with its autograd history, for logging
--leak last    so does the last rank (in a job across machines, one of the last node)
--leak all     every rank adds its loss to a running total with its history
--uneven       each rank's batch is (rank + 1) times the first's: the ranks' peaks differ
--kill-rank R --kill-at S   rank R kills itself (SIGKILL) at step S, as the out-of-memory killer would
"""
import argparse
import os
import signal

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--leak", choices=["none", "rank0", "last", "all"], default="none")
    parser.add_argument("--uneven", action="store_true")
    parser.add_argument("--kill-rank", type=int, default=-1)
    parser.add_argument("--kill-at", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batch = args.batch * (rank + 1 if args.uneven else 1)
    logged_losses = []
    total_loss = 0
    for step in range(args.steps):
        if rank == args.kill_rank and step == args.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        inputs, targets = torch.randn(batch, 64), torch.randint(0, 10, (batch,))
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (args.leak == "rank0" and rank == 0) or (args.leak == "last" and
                                                    rank == dist.get_world_size() - 1):
            logged_losses.append(loss)  # the leak: the loss with its graph, kept for logging
        if args.leak == "all":
            total_loss += loss  # the leak: a running total that keeps every step's graph
    dist.barrier()
    print(f"rank {rank}: done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
