"""Differential checks of `nmt` against the papers' official code (not shipped in the wheel)."""
