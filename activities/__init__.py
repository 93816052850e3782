"""Activities: every piece of I/O a run does. Each is a method on a class holding its clients."""

from activities.mirror import MirrorActivities
from activities.model import ModelActivities
from activities.tools import ToolActivities
from activities.verify import VerifyActivities

__all__ = ["MirrorActivities", "ModelActivities", "ToolActivities", "VerifyActivities"]
