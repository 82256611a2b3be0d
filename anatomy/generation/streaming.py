"""Streaming: text printed as it is generated, through Hugging Face's streamer protocol.

``generate(..., streamer=s)`` calls ``s.put(prompt_ids)`` once, ``s.put(token_ids)`` after every step and
``s.end()`` at the end, exactly as HF's ``generate`` does, so HF's own ``TextStreamer`` works with ours and
``TerminalStreamer`` works with HF's. It decodes everything generated so far each time and prints only the new
suffix (a byte-level tokenizer may split one character over several tokens: text ending in the replacement
character ``U+FFFD`` waits for the next token).
"""

from __future__ import annotations

import sys
from typing import Any

import torch


class TerminalStreamer:
    """Print one sequence's new text to ``file`` (default stdout) as tokens arrive; batch size 1."""

    def __init__(
        self, tokenizer: Any, *, skip_prompt: bool = True, file: Any = None, skip_special: bool | None = None
    ) -> None:
        """``skip_special=False`` prints special tokens (an eos) as their text; None: the tokenizer's default."""
        self.tokenizer, self.skip_prompt, self.file = tokenizer, skip_prompt, file
        self.decode_kwargs = {} if skip_special is None else {"skip_special": skip_special}
        self.ids: list[int] = []
        self.printed = 0  # characters of decode(ids) already written
        self._next_is_prompt = True

    def _write(self, text: str) -> None:
        out = self.file if self.file is not None else sys.stdout
        out.write(text)
        out.flush()

    def put(self, value: torch.Tensor) -> None:
        if value.dim() > 1 and value.shape[0] > 1:
            raise ValueError(f"TerminalStreamer prints one sequence; got a batch of {value.shape[0]}")
        if self._next_is_prompt:
            self._next_is_prompt = False
            if self.skip_prompt:
                return
        self.ids += value.flatten().tolist()
        text = self.tokenizer.decode(self.ids, **self.decode_kwargs)
        if text.endswith("\ufffd"):  # half a character: wait for the rest
            return
        self._write(text[self.printed :])
        self.printed = len(text)

    def end(self) -> None:
        """Flush what is left; the next ``put`` is a new call's prompt (the text so far is kept, so a caller that
        generates in several windows prints one continuous text)."""
        text = self.tokenizer.decode(self.ids, **self.decode_kwargs) if self.ids else ""
        self._write(text[self.printed :])
        self.printed = len(text)
        self._next_is_prompt = True
