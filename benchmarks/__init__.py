"""Ratio benchmarks of jaxmbs against a NumPy + SciPy implementation of the same method."""
