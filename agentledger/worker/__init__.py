"""Assembling a worker: its clients, activities, workflows and tool set (worker_factory),
and running one in your own process (worker_api). The top layer beside the CLI.
"""
