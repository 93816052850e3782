"""The shop's own Temporal project."""
