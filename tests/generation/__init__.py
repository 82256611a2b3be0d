"""Tests of anatomy.generation (a package, so its test module names cannot clash with other folders)."""
