"""The command line: `agentrun` (also `python -m agentrun`, `python starter.py`), its groups
and its rendering."""
