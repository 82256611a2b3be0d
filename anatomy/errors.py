"""Errors shared across rooms, defined once so that one ``except`` catches them wherever they are raised."""

from __future__ import annotations


class CheckpointError(ValueError):
    """A checkpoint (a weights file, its config, a training run's checkpoint directory) that is missing, cannot be
    read or written, or does not match what loads it; the message names the file."""
