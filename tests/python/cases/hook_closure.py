# A forward pre-hook registered every step, closing over a tensor made that step: the hooks (and
# their tensors) pile up on the module.
import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))


def step(i):
    scale = torch.rand(32, 32)

    def scale_inputs(module, inputs):
        return (inputs[0] * scale[0],)

    model[2].register_forward_pre_hook(scale_inputs)
    with torch.no_grad():
        model(torch.randn(8, 32))
