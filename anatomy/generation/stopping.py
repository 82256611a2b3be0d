"""Stop strings: end a row when its text completes one of them (Hugging Face's ``stop_strings`` rule).

A stop string may span several tokens and may start or end inside one: for ``"stop"`` the tokens
``["las", "topper"]`` complete it. As in HF's ``StopStringCriteria``, a row stops only when the stop string
*overlaps its newest token*: checking after every token, the first completion is always caught, and a stop string
already in the prompt does not end generation before it starts. The check decodes only the row's last
``len(longest stop string) + 2`` tokens with the tokenizer (every token decodes to at least one character, so
that tail holds any stop string that reaches the newest token).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class StopStrings:
    def __init__(self, stop_strings: str | Sequence[str], tokenizer: Any) -> None:
        stops = [stop_strings] if isinstance(stop_strings, str) else list(stop_strings)
        if not stops or not all(isinstance(s, str) and s for s in stops):
            raise ValueError(f"stop_strings must be a non-empty string or a list of them, got {stop_strings!r}")
        if tokenizer is None or not callable(getattr(tokenizer, "decode", None)):
            raise ValueError("stop_strings needs tokenizer= (an object with decode(ids) -> str) to read the text")
        self.stops, self.tokenizer = stops, tokenizer
        self.tail = max(map(len, stops)) + 2

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids) if ids else ""

    def matches(self, ids: Sequence[int]) -> bool:
        """Whether ``ids`` (a row's prompt and new tokens) end by completing a stop string."""
        tail = list(ids[-self.tail :])
        if not tail:
            return False
        text, before = self._decode(tail), self._decode(tail[:-1])
        for stop in self.stops:
            at = text.rfind(stop)
            if at >= 0 and at + len(stop) > len(before):  # the match reaches into the newest token
                return True
        return False

    def __call__(self, rows: Sequence[Sequence[int]]) -> list[bool]:
        return [self.matches(row) for row in rows]
