"""The demo agent, an example of agentrun's public API: its tools (with their own tables) and
its profile live here, outside the engine. `python worker.py` loads these tools when no others
are named; `python starter.py demo` runs its agent."""

from agentrun_demo.profile import agents, support_desk
from agentrun_demo.tools import registry

__all__ = ["agents", "registry", "support_desk"]
