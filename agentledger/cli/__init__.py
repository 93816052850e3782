"""The command line: `agentledger` (also `python -m agentledger`, `python starter.py`), its groups
and its rendering."""
