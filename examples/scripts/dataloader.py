# DataLoader workers that copy their dataset on read, for `memseal run --follow-fork`:
#
#   memseal run --follow-fork -- python examples/scripts/dataloader.py --dataset lists
#
# --dataset lists holds the samples as Python lists: every read writes the objects' reference
# counts, so each forked worker copies the pages of the dataset it touches (its private memory
# grows while its tensor memory does not). --dataset tensor holds them in one tensor: nothing is
# copied. --items sets the dataset's size.
import argparse

import torch
from torch.utils.data import DataLoader, Dataset


class ListDataset(Dataset):
    def __init__(self, items):
        self.samples = [[float(i + j) for j in range(16)] for i in range(items)]

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        return torch.tensor(self.samples[index])


class TensorDataset(Dataset):
    def __init__(self, items):
        self.samples = torch.arange(items * 16, dtype=torch.float32).reshape(items, 16)

    def __len__(self):
        return self.samples.shape[0]

    def __getitem__(self, index):
        return self.samples[index].clone()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", choices=["lists", "tensor"], default="lists")
    parser.add_argument("--items", type=int, default=400_000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    dataset = (ListDataset if args.dataset == "lists" else TensorDataset)(args.items)
    loader = DataLoader(dataset, batch_size=256, num_workers=args.workers,
                        multiprocessing_context="fork")
    total = 0.0
    for batch in loader:
        total += float(batch.sum())
    print(f"sum {total:.1f}")


if __name__ == "__main__":
    main()
