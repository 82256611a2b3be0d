"""The KV cache: the buffered append against plain concatenation, the rolling window cache, autograd, bad input."""

from __future__ import annotations

import pytest
import torch

from anatomy.components.kv_cache import KVCache


def _entries(b, t, seed, hkv=2, dh=4):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, hkv, t, dh, generator=g), torch.randn(b, hkv, t, dh, generator=g)


@pytest.mark.parametrize("capacity", [None, 1, 5, 100])
def test_buffered_cache_equals_concatenation(capacity):
    cache, reference = KVCache(capacity), KVCache()
    s = 0
    for step, t in enumerate([7, 1, 1, 3, 1, 20, 1]):  # crosses several doublings when capacity is small
        k, v = _entries(2, t, step)
        pos = torch.arange(s, s + t)[None]
        got = cache.update(k, v, pos)
        want = reference._concatenate(k, v, pos)
        for a, b in zip(got, want):
            assert torch.equal(a, b)
        s += t
    assert len(cache) == s == 34


def test_buffered_cache_writes_only_new_slots():
    cache = KVCache(capacity=64)
    k, v = _entries(1, 5, 0)
    cache.update(k, v, torch.arange(5)[None])
    buffer = cache._k_buf
    k1, v1 = _entries(1, 1, 1)
    k_all, _, _ = cache.update(k1, v1, torch.tensor([[5]]))
    assert cache._k_buf is buffer  # no reallocation while there is room
    assert k_all.data_ptr() == buffer.data_ptr()  # a view, not a copy
    assert torch.equal(k_all[..., :5, :], k) and torch.equal(k_all[..., 5:, :], k1)


def test_cache_positions_broadcast_to_the_batch():
    cache = KVCache()
    k, v = _entries(3, 2, 0)
    cache.update(k, v, torch.arange(2)[None])  # (1, T) positions
    k1, v1 = _entries(3, 1, 1)
    _, _, pos = cache.update(k1, v1, torch.tensor([[2], [0], [1]]))  # (B, 1) positions
    assert pos.tolist() == [[0, 1, 2], [0, 1, 0], [0, 1, 1]]


def test_cache_under_autograd_concatenates_and_backpropagates():
    cache = KVCache(capacity=16)
    k = torch.randn(1, 2, 3, 4, requires_grad=True)
    v = torch.randn(1, 2, 3, 4, requires_grad=True)
    k_all, v_all, _ = cache.update(k, v, torch.arange(3)[None])
    k1 = torch.randn(1, 2, 1, 4, requires_grad=True)
    k_all, v_all, _ = cache.update(k1, k1.detach().clone().requires_grad_(), torch.tensor([[3]]))
    (k_all.sum() + v_all.sum()).backward()
    assert torch.equal(k.grad, torch.ones_like(k)) and torch.equal(k1.grad, torch.ones_like(k1))


def test_cache_bad_input():
    with pytest.raises(ValueError, match="capacity must be a positive integer or None, got 0"):
        KVCache(0)
    cache = KVCache()
    cache.update(*_entries(2, 3, 0), torch.arange(3)[None])
    with pytest.raises(ValueError, match="kv_cache holds batch size 2, got keys for batch 3"):
        cache.update(*_entries(3, 1, 1), torch.tensor([[3]]))
    assert len(cache) == 3  # the refused update left the cache as it was


@pytest.mark.parametrize("capacity", [None, 3, 1000])
def test_window_cache_rolls_and_holds_the_last_entries(capacity):
    w = 4
    rolling, full = KVCache(capacity, window=w), KVCache()
    s = 0
    for step, t in enumerate([6, 1, 1, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1]):
        k, v = _entries(2, t, step)
        pos = torch.arange(s, s + t)[None]
        got = rolling.update(k, v, pos)
        want = full.update(k, v, pos)
        s += t
        held = min(s, w - 1 + t)  # the last W - 1 earlier slots and the T new ones
        assert len(rolling) == held and rolling.seen == full.seen == s
        for a, b in zip(got, want):
            assert torch.equal(a, b[..., -held:, :] if a.dim() == 4 else b[..., -held:])
        assert rolling._k_buf.shape[-2] <= max(2 * w, 16, held)  # memory O(W), not O(S)
    assert s == 30


# --------------------------------------------------------------------------------------- the static cache


def test_static_cache_writes_by_index_and_keeps_its_buffers():
    from anatomy.components.kv_cache import StaticKVCache

    growing = KVCache()
    k, v = _entries(2, 5, 0)
    growing.update(k, v, torch.arange(5)[None])
    static = StaticKVCache.from_cache(growing, 8)
    buffers = (static.k_buf.data_ptr(), static.v_buf.data_ptr(), static.pos_buf.data_ptr())
    assert static.seen == 5 and static.capacity == 8 and torch.equal(static.slots(2), torch.tensor([5, 6]))
    k1, v1 = _entries(2, 2, 1)
    k_all, v_all, pos = static.update(k1, v1, torch.tensor([[5, 6]]))
    assert k_all.shape == (2, 2, 8, 4) and pos.shape == (2, 8)  # the whole width, every call
    assert torch.equal(k_all[..., :5, :], k) and torch.equal(k_all[..., 5:7, :], k1)
    assert not k_all[..., 7:, :].any() and torch.equal(pos[0, :7], torch.arange(7))  # unwritten: zeros
    assert int(static.cursor) == 7 and torch.equal(static.k, k_all[..., :7, :])
    static.batch_select(torch.tensor([1, 0]))  # beams: reordered in place
    assert (static.k_buf.data_ptr(), static.v_buf.data_ptr(), static.pos_buf.data_ptr()) == buffers
    assert torch.equal(static.k_buf[0, :, :5], k[1]) and torch.equal(static.v_buf[1, :, 5:7], v1[0])
    back = static.to_cache()
    assert isinstance(back, KVCache) and back.seen == 7 and torch.equal(back.k, static.k)


def test_static_cache_refuses_an_empty_or_too_full_cache():
    from anatomy.components.kv_cache import StaticKVCache

    with pytest.raises(ValueError, match="made from a filled cache"):
        StaticKVCache.from_cache(KVCache(), 8)
    full = KVCache()
    full.update(*_entries(1, 9, 0), torch.arange(9)[None])
    with pytest.raises(ValueError, match="capacity must be >= the 9 entries seen, got 8"):
        StaticKVCache.from_cache(full, 8)
