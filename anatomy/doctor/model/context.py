"""What every model probe reads and writes: the model and its call, its stack, one capture of the blocks' calls,
the report's "found" entries and the probes that could not decide (``skipped``)."""

from __future__ import annotations

from typing import Any

import torch

from anatomy.doctor.model.blocks import BlockCheck, Calls, Stack
from anatomy.doctor.model.contract import LM, ForwardError
from anatomy.doctor.model.found import Op, op_log
from anatomy.doctor.report.findings import Report

__anatomy_transparent__ = True


class Context:
    """What every model probe reads: the model and its call, its stack, one capture of the blocks' calls."""

    def __init__(
        self, lm: LM, stack: Stack | None, calls: Calls | None, base: torch.Tensor, block_check: BlockCheck
    ) -> None:
        self.lm, self.stack, self.calls, self.base = lm, stack, calls, base
        self.block_check = block_check
        self.found: dict[str, Any] = {}
        self.skipped: list[dict[str, str]] = []
        self.layer_reports: list[Report | str] = []

    def skip(self, probe: str, en: str, zh: str) -> None:
        self.skipped.append({"probe": probe, "en": en, "zh": zh})

    def ops(self, ids: torch.Tensor, **kwargs: Any) -> list[Op]:
        """The op log of one forward, with a marker op ``"<block>"`` where each block starts and ``"</block>"``
        where it ends (an empty list when the forward raises)."""
        log: list[Op] = []
        handles = []
        for block in self.stack.blocks if self.stack is not None else []:
            handles.append(block.register_forward_pre_hook(lambda *_: log.append(Op("<block>", "", 0, "", ()))))
            handles.append(block.register_forward_hook(lambda *_: log.append(Op("</block>", "", 0, "", ()))))
        try:
            with self.lm.running(), op_log(log):
                self.lm.forward(ids, **kwargs)
        except ForwardError:
            return []
        finally:
            for h in handles:
                h.remove()
        return log
