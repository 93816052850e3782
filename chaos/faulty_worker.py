"""`agentledger-worker` with a fault plan armed: the chaos suite's and crash tests' worker.

AGENTLEDGER_FAULTS (`point[:tool or model],...`, agentledger/core/faults.py) and
AGENTLEDGER_ZOMBIE_SECONDS are read here, never by agentledger's own settings: no user's worker
can arm a fault. `python -m chaos.faulty_worker --demo ...` takes agentledger-worker's flags.
"""

import os

from agentledger.core import faults
from agentledger.worker.main import main

if __name__ == "__main__":
    faults.install(
        faults.FaultPlan.parse(
            os.environ.get("AGENTLEDGER_FAULTS", ""),
            float(os.environ.get("AGENTLEDGER_ZOMBIE_SECONDS") or 12.0),
        )
    )
    main()
