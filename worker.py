"""Start one worker for this deployment: `python worker.py --help`, the same as `agentrun-worker`.

The worker lives in the package (`agentrun.worker.main`); this file is the design card's entry
point for a checkout.
"""

from agentrun.worker.main import main

if __name__ == "__main__":
    main()
