"""One module per section of the post; importing this package registers every claim."""

from anatomy.experiments.claims import multihead  # noqa: F401
