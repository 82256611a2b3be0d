"""Reference solutions of ``anatomy learn``, one file per exercise, written as a learner would write them.

``anatomy learn solution ID`` prints one of these files (after a real attempt, or with ``--force``); the grader
runs them as the reference."""
