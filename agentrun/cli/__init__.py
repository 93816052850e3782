"""The command line's groups and its text rendering; `starter.py` is the entry point."""
