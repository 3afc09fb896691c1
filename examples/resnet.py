"""A small ResNet-style image classifier (fp32, random weights, nothing downloaded).

    autosched tune-model examples/resnet.py --target llvm --trials 200
    autosched export-model examples/resnet.py --target llvm -o resnet_kernels

A 3x3 stem convolution with bias and ReLU, then stages of basic residual blocks
(conv-BN-ReLU-conv-BN, identity or 1x1-strided shortcut, ReLU), global average pooling
and a linear classifier, as in He et al. (2016) at CIFAR scale. The model returns logits;
`loss_fn` is the cross-entropy against fixed labels.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

CONFIG = {"width": 16, "stages": 2, "blocks": 1, "image": 32, "batch": 8, "classes": 10}


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, width: int, stages: int, blocks: int, classes: int):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, 1, 1, bias=True)
        layers, cin = [], width
        for s in range(stages):
            cout = width * 2 ** s
            for b in range(blocks):
                layers.append(BasicBlock(cin, cout, 2 if s > 0 and b == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.blocks(F.relu(self.stem(x)))
        return self.fc(x.mean(dim=(2, 3)))


def make_model(width=CONFIG["width"], stages=CONFIG["stages"], blocks=CONFIG["blocks"],
               classes=CONFIG["classes"], seed=0):
    """The network above with deterministic random weights."""
    torch.manual_seed(seed)
    return ResNet(width, stages, blocks, classes)


def make_inputs(batch=CONFIG["batch"], image=CONFIG["image"], seed=0):
    """A batch of random 3-channel images."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 3, image, image, generator=g),)


def loss_fn(output):
    """Cross-entropy against labels fixed by position in the batch."""
    labels = torch.arange(output.size(0)) % output.size(1)
    return F.cross_entropy(output, labels)
