"""Measurement: bandwidth matrices, memory and compute samples, importers."""
