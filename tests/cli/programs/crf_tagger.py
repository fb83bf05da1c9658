"""A sequence tagger whose loss is a CRF's forward algorithm: a Python loop over the time steps of
every sentence inside the loss. With --leak, the classic `running_loss = running_loss + loss`
keeps every step's autograd graph; without it, `loss.item()` keeps a number."""
import argparse

import torch
import torch.nn as nn


class Tagger(nn.Module):
    def __init__(self, words, tags, width):
        super().__init__()
        self.embedding = nn.Embedding(words, width)
        self.emissions = nn.Linear(width, tags)
        self.transitions = nn.Parameter(torch.randn(tags, tags) * 0.1)

    def forward_algorithm(self, emissions):
        alpha = emissions[:, 0]
        for t in range(1, emissions.size(1)):  # the time steps: a loop inside the step
            scores = alpha.unsqueeze(2) + self.transitions.unsqueeze(0) + emissions[:, t].unsqueeze(1)
            alpha = torch.logsumexp(scores, dim=1)
        return torch.logsumexp(alpha, dim=1)

    def loss(self, words, tags):
        emissions = self.emissions(self.embedding(words))
        gold = emissions.gather(2, tags.unsqueeze(2)).squeeze(2).sum(1)
        return (self.forward_algorithm(emissions) - gold).mean()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--leak", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = Tagger(words=500, tags=12, width=64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    running_loss = 0.0
    for step in range(args.steps):
        words = torch.randint(0, 500, (16, 24))
        tags = torch.randint(0, 12, (16, 24))
        optimizer.zero_grad()
        loss = model.loss(words, tags)
        loss.backward()
        optimizer.step()
        if args.leak:
            running_loss = running_loss + loss
        else:
            running_loss += loss.item()
    print("mean loss", float(running_loss) / args.steps)


if __name__ == "__main__":
    main()
