"""The demo agent, an example of agentrun's public API: its tools (with their own tables) and
its profile live here, outside the engine. `agentrun-worker` loads these tools when no others
are named; `agentrun demo` runs its agent."""

from agentrun.demo.profile import agents, support_desk
from agentrun.demo.tools import registry

__all__ = ["agents", "registry", "support_desk"]
