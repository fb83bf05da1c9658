"""A GAN trained as PyTorch's DCGAN example trains: batches from a DataLoader with forked workers,
three backward passes and two optimizers per iteration. With --leak, the running total of the
discriminator's error keeps its graph (`errD_sum += errD`); without it, `errD.item()`."""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--leak", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(2048, 64))
    loader = DataLoader(data, batch_size=16, shuffle=True, num_workers=2)
    generator = nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Linear(128, 64), nn.Tanh())
    discriminator = nn.Sequential(nn.Linear(64, 128), nn.LeakyReLU(0.2), nn.Linear(128, 1))
    criterion = nn.BCEWithLogitsLoss()
    optimizer_d = torch.optim.Adam(discriminator.parameters(), lr=2e-4)
    optimizer_g = torch.optim.Adam(generator.parameters(), lr=2e-4)
    errD_sum = 0.0
    for _ in range(args.epochs):
        for (real,) in loader:
            discriminator.zero_grad()
            errD_real = criterion(discriminator(real), torch.ones(real.size(0), 1))
            errD_real.backward()
            fake = generator(torch.randn(real.size(0), 16))
            errD_fake = criterion(discriminator(fake.detach()), torch.zeros(real.size(0), 1))
            errD_fake.backward()
            errD = errD_real + errD_fake
            optimizer_d.step()
            generator.zero_grad()
            errG = criterion(discriminator(fake), torch.ones(real.size(0), 1))
            errG.backward()
            optimizer_g.step()
            if args.leak:
                errD_sum += errD
            else:
                errD_sum += errD.item()
    print("mean errD", float(errD_sum) / (args.epochs * len(loader)))


if __name__ == "__main__":
    main()
