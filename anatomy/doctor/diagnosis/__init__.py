"""The differential diagnosis: the reference with the learner's weights, each fault switched on in turn."""
