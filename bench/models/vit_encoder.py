"""A ViT-style encoder on torch's own nn.TransformerEncoderLayer (pre-norm, GELU), for
`bench/training_plans.py --model-file`."""
import torch
from torch import nn

class Encoder(nn.Module):
    def __init__(self, d=192, heads=4, layers=4, classes=10):
        super().__init__()
        self.embed = nn.Linear(48, d)
        self.layers = nn.ModuleList(nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0,
                                    activation="gelu", batch_first=True, norm_first=True)
                                    for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(self.norm(h).mean(1))

def make_model():
    torch.manual_seed(0)
    return Encoder()

def make_inputs():
    torch.manual_seed(1)
    return torch.randn(8, 64, 48)
