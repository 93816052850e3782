"""Activities: every piece of I/O a run does. Each is a method on a class holding its clients."""

from agentrun.activities.fork import ForkActivities
from agentrun.activities.mirror import MirrorActivities
from agentrun.activities.model import ModelActivities
from agentrun.activities.tools import ToolActivities
from agentrun.activities.verify import VerifyActivities

__all__ = [
    "ForkActivities",
    "MirrorActivities",
    "ModelActivities",
    "ToolActivities",
    "VerifyActivities",
]
