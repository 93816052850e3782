"""This deployment's own activities, registered by worker.py beside agentrun's engine."""
