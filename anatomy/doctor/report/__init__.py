"""Findings, the report (text and JSON), and the learner's lines behind each finding."""
