"""One serial smoke run of every claim, shared by the tests that read it (it takes a while on 2 cores)."""

from __future__ import annotations

import pytest

from anatomy.experiments.runner import run_claims


@pytest.fixture(scope="session")
def smoke_serial(tmp_path_factory):
    """``(out, doc)`` of ``run_claims(None, preset="smoke", jobs=1)``: every claim, one process, one seed."""
    out = tmp_path_factory.mktemp("smoke-serial")
    return out, run_claims(None, preset="smoke", out=out, progress=False, jobs=1)
