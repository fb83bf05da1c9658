"""Inference with neither optimizer nor DataLoader: a decoder called once per request, which decodes
greedily in a Python loop of its own (a loop inside the step). With --leak, every request's output
is kept in a list."""
import argparse

import torch
import torch.nn as nn


class Decoder(nn.Module):
    def __init__(self, words, width):
        super().__init__()
        self.embedding = nn.Embedding(words, width)
        self.cell = nn.GRUCell(width, width)
        self.out = nn.Linear(width, words)

    def forward(self, start, length):
        hidden = torch.zeros(start.size(0), self.cell.hidden_size)
        token, logits = start, []
        for _ in range(length):  # decoding steps: a loop inside the step
            hidden = self.cell(self.embedding(token), hidden)
            scores = self.out(hidden)
            logits.append(scores)
            token = scores.argmax(dim=1)
        return torch.stack(logits, dim=1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--leak", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = Decoder(words=300, width=64).eval()
    kept = []
    with torch.inference_mode():
        for _ in range(args.requests):
            output = model(torch.randint(0, 300, (4,)), 12)
            if args.leak:
                kept.append(output)
    print("served", args.requests)


if __name__ == "__main__":
    main()
