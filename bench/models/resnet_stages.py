"""A ResNet-18 shape: four stages of two BasicBlocks (16-128 channels, stride-2 downsampling
with 1x1 projections), 8 x 3 x 32 x 32 images; the layers span the stages
(layer1.0 ... layer4.1), for `bench/training_plans.py --model-file`."""
import torch
from torch import nn
import torch.nn.functional as F

class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + idt)

class ResNet(nn.Module):
    def __init__(self, widths=(16, 32, 64, 128)):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        cin = widths[0]
        for i, w in enumerate(widths):
            s = 1 if i == 0 else 2
            setattr(self, f"layer{i+1}", nn.Sequential(BasicBlock(cin, w, s), BasicBlock(w, w, 1)))
            cin = w
        self.fc = nn.Linear(cin, 10)
    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(x.mean((2, 3)))

def make_model():
    torch.manual_seed(0)
    return ResNet()

def make_inputs():
    torch.manual_seed(1)
    return torch.randn(8, 3, 32, 32)

def loss_fn(out):
    return F.cross_entropy(out, torch.arange(out.shape[0]) % 10)
