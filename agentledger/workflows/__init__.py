"""Workflows: deterministic orchestration only. All I/O lives in activities.

`run_agent` is public: it runs an agent as a child of your own workflow. This package's
`__init__` stays small: the workflow sandbox imports it for every run it starts.
"""

from agentledger.workflows.agent_run import AgentRunWorkflow
from agentledger.workflows.child_runs import run_agent

__all__ = ["AgentRunWorkflow", "run_agent"]
