"""Comparisons over measured rows: pairing, repeats, crossovers, schedules, provenance, the calculator check."""
