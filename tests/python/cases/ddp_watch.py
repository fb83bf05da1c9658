"""A data-parallel loop (gloo, CPU) under memseal.watch(gather=True): every rank's report goes to
rank 0, which writes the merged view. Launched by torchrun (RANK in the environment) or, with
--spawn N, by torch.multiprocessing.spawn (the rank known only to torch.distributed).

    python -m torch.distributed.run --standalone --nproc-per-node 2 ddp_watch.py --out DIR [--leak]
    python ddp_watch.py --spawn 2 --out DIR [--leak] [--silent-rank R]
"""
import argparse
import datetime
import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import memseal


def train(rank, world_size, args):
    # A rank that never sends its report is waited for as long as the job's store waits.
    timeout = {"timeout": datetime.timedelta(seconds=5)} if args.silent_rank is not None else {}
    if args.spawn:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(args.out, "rendezvous"),
                                rank=rank, world_size=world_size, **timeout)
    else:
        dist.init_process_group("gloo", **timeout)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                                        torch.nn.Linear(64, 4)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    gather = dist.get_rank() != args.silent_rank
    with memseal.watch(warmup=3, gather=gather, on_leak="warn") as watch:
        for _ in range(40):
            loss = model(torch.randn(16, 32)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if args.leak and dist.get_rank() == 0:
                kept.append(loss)  # rank 0 keeps its losses with their graphs
            watch.step()
    report = watch.report()
    with open(os.path.join(args.out, f"rank{dist.get_rank()}.json"), "w") as file:
        json.dump({"rank": report.rank.rank if report.rank else None,
                   "world_size": report.rank.world_size if report.rank else None,
                   "leak": report.leak, "merged": watch.merged is not None}, file)
    if watch.merged is not None:
        with open(os.path.join(args.out, "merged.json"), "w") as file:
            file.write(watch.merged.to_json())
    if args.silent_rank is None:
        dist.barrier()  # no rank tears its connections down while another still uses them
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--leak", action="store_true")
    parser.add_argument("--spawn", type=int, default=0)
    parser.add_argument("--silent-rank", type=int, help="this rank does not send its report")
    arguments = parser.parse_args()
    torch.set_num_threads(1)
    if arguments.spawn:
        torch.multiprocessing.spawn(train, args=(arguments.spawn, arguments), nprocs=arguments.spawn)
    else:
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), arguments)
