"""PyTorch's time-sequence-prediction example, small: two LSTMCells unrolled over every time step
of a sine wave inside forward(), trained with LBFGS (whose closure runs forward and backward several
times inside one optimizer step). Healthy: its memory levels off."""
import argparse

import torch
import torch.nn as nn
import torch.optim as optim


class Sequence(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.hidden = hidden
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)

    def forward(self, sequence):
        outputs = []
        h_t = torch.zeros(sequence.size(0), self.hidden)
        c_t = torch.zeros(sequence.size(0), self.hidden)
        h_t2 = torch.zeros(sequence.size(0), self.hidden)
        c_t2 = torch.zeros(sequence.size(0), self.hidden)
        for input_t in sequence.split(1, dim=1):  # the time steps: a loop inside the step
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            outputs.append(self.linear(h_t2))
        return torch.cat(outputs, dim=1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--length", type=int, default=40)
    args = parser.parse_args()
    torch.manual_seed(0)
    x = torch.arange(args.length + 1, dtype=torch.float32)
    waves = torch.stack([torch.sin((x + shift) / 4.0) for shift in range(8)])
    inputs, targets = waves[:, :-1], waves[:, 1:]
    model = Sequence(16)
    criterion = nn.MSELoss()
    optimizer = optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
    for _ in range(args.steps):
        def closure():
            optimizer.zero_grad()
            loss = criterion(model(inputs), targets)
            loss.backward()
            return loss
        optimizer.step(closure)
    print("done")


if __name__ == "__main__":
    main()
