"""The model's other probes (positions, padding, eval(), tying, the final norm, generate): filled in below."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__anatomy_transparent__ = True

PROBES: list[tuple[str, Callable[[Any], list[Any]]]] = []
