"""One intra-op thread for in-process training tests: bit-exact comparisons and polite on a shared machine."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
