"""Loading the learner's file, building the module and calling it: the subject, time limits, isolation."""
