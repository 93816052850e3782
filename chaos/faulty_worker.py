"""`agentrun-worker` with a fault plan armed: the chaos suite's and crash tests' worker.

AGENTRUN_FAULTS (`point[:tool or model],...`, agentrun/core/faults.py) and
AGENTRUN_ZOMBIE_SECONDS are read here, never by agentrun's own settings: no user's worker
can arm a fault. `python -m chaos.faulty_worker --demo ...` takes agentrun-worker's flags.
"""

import os

from agentrun.core import faults
from agentrun.worker.main import main

if __name__ == "__main__":
    faults.install(
        faults.FaultPlan.parse(
            os.environ.get("AGENTRUN_FAULTS", ""),
            float(os.environ.get("AGENTRUN_ZOMBIE_SECONDS") or 12.0),
        )
    )
    main()
