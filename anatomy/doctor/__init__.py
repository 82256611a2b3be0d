"""The doctor: which of the post's pitfalls does *your* attention or block have?

``anatomy check FILE.py:CLASS`` (or :func:`check`) runs the learner's module on small fixed float64 inputs, next
to our reference with the same weights. Behavioural probes (``probes/``) need no weights: causal and padding
leaks, token order, batch independence, NaN on fully masked rows, the block's wiring. The differential diagnosis
(``diagnosis/diagnose.py``) maps the learner's parameters onto our ``MultiHeadAttention`` / ``EncoderBlock``
(``mapping/``, grouped-query attention included) and names the bug-zoo fault (``anatomy.pitfalls``), or the pair
of faults, that reproduces the learner's output, with the post's explanation in English and Chinese. Importing,
building and each forward run under a time limit (``loading/limits.py``). docs/doctor.md documents the contract
and the JSON schema. The op-level recorder (``anatomy.tracing``: :func:`record`) and the learner's own shape table
(``trace/learner_trace.py``: :func:`trace_learner`, ``anatomy trace FILE.py:CLASS``) are documented there too.
"""

from anatomy.doctor.check import check
from anatomy.doctor.loading.subject import CheckError, CheckTimeout
from anatomy.doctor.report.findings import SCHEMA, Finding, Report
from anatomy.doctor.trace.learner_trace import trace_learner
from anatomy.tracing import record

__all__ = ["SCHEMA", "CheckError", "CheckTimeout", "Finding", "Report", "check", "record", "trace_learner"]
