"""`anatomy trace FILE.py:CLASS`: the learner's own shape table."""
