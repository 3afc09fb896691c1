"""Four residual conv + BatchNorm + ReLU blocks, for `bench/training_plans.py --model-file`."""
import torch
from torch import nn
import torch.nn.functional as F

class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(x + self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))

class Net(nn.Module):
    def __init__(self, c=32, n=4):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.stages = nn.Sequential(*(Block(c) for _ in range(n)))
        self.fc = nn.Linear(c, 10)

    def forward(self, x):
        return self.fc(self.stages(self.stem(x)).mean((2, 3)))

def make_model():
    torch.manual_seed(0)
    return Net()

def make_inputs():
    torch.manual_seed(1)
    return torch.randn(16, 3, 32, 32)

def loss_fn(out):
    return F.cross_entropy(out, torch.arange(out.shape[0]) % 10)
