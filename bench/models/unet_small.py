"""A small U-Net: three down blocks and two up blocks (conv + GroupNorm + SiLU, 16-64
channels), skip connections concatenated outside the blocks, 4 x 3 x 64 x 64 images and
the default loss; the layers are the down and up paths, for `bench/training_plans.py
--model-file`."""
import torch
from torch import nn
import torch.nn.functional as F

def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.GroupNorm(4, cout), nn.SiLU(),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.GroupNorm(4, cout), nn.SiLU())

class UNet(nn.Module):
    def __init__(self, w=(16, 32, 64)):
        super().__init__()
        self.down = nn.ModuleList([block(3, w[0]), block(w[0], w[1]), block(w[1], w[2])])
        self.up = nn.ModuleList([block(w[2] + w[1], w[1]), block(w[1] + w[0], w[0])])
        self.out = nn.Conv2d(w[0], 3, 1)
    def forward(self, x):
        skips = []
        for i, b in enumerate(self.down):
            x = b(x)
            if i < len(self.down) - 1:
                skips.append(x); x = F.max_pool2d(x, 2)
        for b in self.up:
            x = F.interpolate(x, scale_factor=2.0)
            x = b(torch.cat([x, skips.pop()], 1))
        return self.out(x)

def make_model():
    torch.manual_seed(0)
    return UNet()

def make_inputs():
    torch.manual_seed(1)
    return torch.randn(4, 3, 64, 64)
