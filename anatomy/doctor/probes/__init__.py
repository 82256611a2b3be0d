"""Behavioural probes on the learner's module (no weights needed), and the state they share."""
