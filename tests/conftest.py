"""Shared test settings: the Hypothesis profiles, one intra-op thread, and the browser the page tests drive.

``default``  a handful of examples per property (a few hundred in the whole suite), no deadline: CPU timings of
             tiny PyTorch models jitter too much for Hypothesis' per-example deadline to mean anything.
``fuzz``     ``HYPOTHESIS_PROFILE=fuzz python -m pytest tests/parity/test_fuzz.py``: at least 10,000 examples per
             test, run by hand (it takes minutes).

A test that wants more cases than the profile's default under ``default`` (the fuzz test, the kernel agreement
property) asks for ``max(its_own_count, settings.default.max_examples)``, so the ``fuzz`` profile still scales it.
"""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow])

settings.register_profile("default", max_examples=6, **_COMMON)
settings.register_profile("fuzz", max_examples=10_000, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(autouse=True)
def one_thread():
    """Every test runs on one intra-op thread (restored afterwards): the suite's tensors are tiny.

    Tensors of a few hundred elements gain nothing from threads, and on a busy machine the OpenMP workers' spin-waits
    cost far more than the work: the property/fuzz modules ran ~25x slower with 2 threads under load.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def browser():
    """Debian's chromium, headless, driven by playwright (never `playwright install`); skipped, with the package to
    install, where either is missing. The flags keep it off this machine's closed network."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright python package is not installed")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Debian chromium is not installed (apt-get install chromium); never `playwright install`")
    with sync_api.sync_playwright() as p:
        launched = p.chromium.launch(
            executable_path=chromium,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
            ],
        )
        try:
            yield launched
        finally:
            launched.close()
