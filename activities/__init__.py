"""Activities: every piece of I/O a run does. Each is a method on a class holding its clients."""

from activities.fork import ForkActivities
from activities.mirror import MirrorActivities
from activities.model import ModelActivities
from activities.tools import ToolActivities
from activities.verify import VerifyActivities

__all__ = [
    "ForkActivities",
    "MirrorActivities",
    "ModelActivities",
    "ToolActivities",
    "VerifyActivities",
]
