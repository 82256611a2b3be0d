"""The claims lab: every claim of the post as an experiment with a measured verdict."""

from anatomy.experiments.registry import CLAIMS, EXPERIMENTS, Claim, Metric, Verdict, claim, experiment
from anatomy.experiments.runner import run_claims, select

__all__ = ["CLAIMS", "EXPERIMENTS", "Claim", "Metric", "Verdict", "claim", "experiment", "run_claims", "select"]
