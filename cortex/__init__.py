"""Cortex: a compiler for recursive deep-learning models."""

__version__ = "0.1.0"
