"""Modules the doctor cannot run, and one with the wrong output shape."""

import torch
import torch.nn as nn


class Raises(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        raise RuntimeError("not implemented yet")


class ReturnsDict(Raises):
    def forward(self, x, mask=None):
        return {"out": self.proj(x)}


class NeedsConfig(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.proj = nn.Linear(config.d_model, config.d_model)

    def forward(self, x):
        return self.proj(x)


class WrongShape(Raises):
    def forward(self, x, mask=None):
        return torch.cat([x, self.proj(x)], dim=-1)


def make_needs_config(d_model, n_heads):
    class Config:
        pass

    config = Config()
    config.d_model = d_model
    return NeedsConfig(config)


print("the doctor hides what a learner's module prints")
