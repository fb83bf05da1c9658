# Healthy, though its memory rises and falls: every step leaves a reference cycle that holds
# tensors, freed by Python's garbage collector every hundred steps or so, not by the program. A
# custom autograd Function keeps its own output on ctx (output -> grad_fn -> ctx -> output), as
# public bug reports about "memory that only gc.collect() gives back" do.
import torch

torch.manual_seed(0)


class KeepsItsOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x * 2
        ctx.out = out  # the cycle
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


model = torch.nn.Linear(64, 64)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


def step(i):
    y = KeepsItsOutput.apply(model(torch.randn(32, 64)))
    loss = y.pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
