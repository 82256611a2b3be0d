"""The op-level recorder of a learner's computation, shared by the doctor and the course.

:func:`record` runs a module under a ``TorchFunctionMode`` and keeps every tensor operation with the learner's
file and line, its shapes, and dimension names inferred from probe sizes that are all different (``dims.py``)
and from provenance; ``ops.py`` is the mode, ``projections.py`` recognises linear maps by behaviour.
"""

from anatomy.tracing.recorder import record
from anatomy.tracing.steps import RecordError, Recording

__all__ = ["RecordError", "Recording", "record"]
