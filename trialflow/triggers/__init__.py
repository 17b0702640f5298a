"""Deferrable triggers (they must live in the installed package: the triggerer imports by path)."""
