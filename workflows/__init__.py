"""This deployment's own workflows, registered by worker.py beside agentrun's engine."""
