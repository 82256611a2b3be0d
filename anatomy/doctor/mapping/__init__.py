"""The learner's parameters onto our reference: by names, by the recorded dataflow, norms by behaviour."""
