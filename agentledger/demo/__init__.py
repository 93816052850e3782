"""The demo agent, an example of agentledger's public API: its tools (with their own tables) and
its profile live here, outside the engine. `agentledger-worker` loads these tools when no others
are named; `agentledger demo` runs its agent."""

from agentledger.demo.profile import agents, support_desk
from agentledger.demo.tools import registry

__all__ = ["agents", "registry", "support_desk"]
