# Re-typed after wdndev/tiny-llm-zh: the course's pretraining dataset as it was before issue #10 ("关于labels的问题":
# PTMDataset.__getitem__ returned X = sample[:-1] as input_ids and Y = sample[1:] as labels, and the model shifts the
# labels once more -- shift_logits = logits[..., :-1, :] against shift_labels = labels[..., 1:]; the author: "确实，真的
# 有点重复了 ... label应该是input的copy，不用偏移，我修正一下"). The model is tiny_llm_zh.py's, unchanged.
#   TinyllmForCausalLM   real bug: labels shifted twice (the dataset's shift + the model's).
import sys
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

sys.path.insert(0, str(Path(__file__).parent))
from tiny_llm_zh import TinyllmConfig  # noqa: E402,F401 - the doctor builds the model from it
from tiny_llm_zh import TinyllmForCausalLM as _Model  # noqa: E402


class TinyllmForCausalLM(_Model):
    """The course's model, unchanged, as the pretraining script imports it."""


class PTMDataset(Dataset):
    """预训练数据集：每条样本是定长的 token 序列（已切好块）。"""

    def __init__(self, samples):
        self.samples = samples

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        sample = self.samples[index]
        X = np.array(sample[:-1]).astype(np.int64)
        Y = np.array(sample[1:]).astype(np.int64)
        input_ids = torch.LongTensor(X)
        labels = torch.LongTensor(Y)
        return {"input_ids": input_ids, "labels": labels}
