# A GAN's discriminator error kept in a running total with its graph (`errD_sum += errD`), as in
# PyTorch's DCGAN example with one line added: two backward passes for the discriminator, one for
# the generator, whose update makes more autograd nodes after the add than the add's own step keeps
# sampled.
import torch
from torch import nn

torch.manual_seed(0)


def _discriminator():
    layers = [nn.Conv2d(3, 8, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True)]
    for channels in (8, 16):
        layers += [nn.Conv2d(channels, channels * 2, 3, 1, 1, bias=False),
                   nn.BatchNorm2d(channels * 2), nn.LeakyReLU(0.2, inplace=True)]
    layers += [nn.Conv2d(32, 1, 8, 1, 0, bias=False), nn.Sigmoid()]
    return nn.Sequential(*layers)


netD = _discriminator()
netG = nn.Sequential(nn.ConvTranspose2d(8, 16, 4, 1, 0, bias=False), nn.BatchNorm2d(16), nn.ReLU(True),
                     nn.ConvTranspose2d(16, 8, 4, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(True),
                     nn.ConvTranspose2d(8, 3, 4, 2, 1, bias=False), nn.Tanh())
criterion = nn.BCELoss()
optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
errD_sum = 0


def step(i):
    global errD_sum
    real = torch.randn(4, 3, 16, 16)
    netD.zero_grad()
    output = netD(real).view(-1)
    errD_real = criterion(output, torch.ones(4))
    errD_real.backward()
    fake = netG(torch.randn(4, 8, 1, 1))
    output = netD(fake.detach()).view(-1)
    errD_fake = criterion(output, torch.zeros(4))
    errD_fake.backward()
    errD = errD_real + errD_fake
    errD_sum += errD
    optimizerD.step()
    netG.zero_grad()
    errG = criterion(netD(fake).view(-1), torch.ones(4))
    errG.backward()
    optimizerG.step()
