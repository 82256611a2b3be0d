"""Modules that never finish: the doctor's time limit (`--timeout`, `check(timeout=...)`) must stop them.

`LoopsForever` is the classic: a `while` whose condition never changes (the learner forgot `i += 1`).
`HangsWithMask` only hangs when it is given a mask, so the first call passes and mask discovery hangs.
`HangsInInit` hangs while it is built. `IgnoresAlarms` switches SIGALRM off before it loops, standing in for C
code that never returns to Python: the alarm cannot stop it, only the command line's watchdog, which ends the
process.
"""

import math
import signal

import torch
import torch.nn as nn


class LoopsForever(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.qkv, self.out = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        B, T, D = x.shape
        q, k, v = (z.view(B, T, self.h, -1).transpose(1, 2) for z in self.qkv(x).chunk(3, -1))
        rows = []
        i = 0
        while i < T:  # one query row at a time ... and `i += 1` is missing
            s = q[:, :, i : i + 1] @ k.transpose(-2, -1) / math.sqrt(D // self.h)
            rows.append(s.softmax(-1) @ v)
        return self.out(torch.cat(rows, dim=2).transpose(1, 2).reshape(B, T, D))


class HangsWithMask(LoopsForever):
    def forward(self, x, mask=None):
        B, T, D = x.shape
        q, k, v = (z.view(B, T, self.h, -1).transpose(1, 2) for z in self.qkv(x).chunk(3, -1))
        s = q @ k.transpose(-2, -1) / math.sqrt(D // self.h)
        while mask is not None and not bool(mask.all()):  # waits for a mask that hides nothing
            s = s + 0
        if mask is not None:
            s = s.masked_fill(~mask.bool()[:, None, None, :], float("-inf"))
        return self.out((s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D))


class HangsInInit(LoopsForever):
    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        while self.h > 0:  # meant: for each head ...
            pass


class IgnoresAlarms(LoopsForever):
    def forward(self, x, mask=None):
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        while True:
            x = x + 0
