# A training loop that grows its batch every step until CUDA runs out of memory. The process is
# capped (torch.cuda.set_per_process_memory_fraction) at --limit-gib, so it fails in seconds on
# any GPU. Under `memseal run` the out-of-memory error says where memseal wrote what was live:
#
#   memseal run --memory-viz oom.pickle -- python examples/cuda/growing_batch_oom.py
import argparse

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit-gib", type=float, default=4.0)
    parser.add_argument("--rows-per-step", type=int, default=256)
    args = parser.parse_args()
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, args.limit_gib * 2**30 / total))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 8192), torch.nn.ReLU(),
                                torch.nn.Linear(8192, 8192), torch.nn.ReLU(),
                                torch.nn.Linear(8192, 10)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    while True:  # ends in torch.OutOfMemoryError
        batch = args.rows_per_step * (step + 1)
        inputs = torch.randn(batch, 1024, device="cuda")
        labels = torch.randint(0, 10, (batch,), device="cuda")
        loss = torch.nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step}: batch {batch}, loss {loss.item():.3f}", flush=True)
        step += 1


if __name__ == "__main__":
    main()
