"""Start, steer and inspect agent runs: `python starter.py --help`, the same as `agentledger
--help`.

The command line lives in the package; this file is the design card's entry point for a
checkout, so `python starter.py demo` works without installing the console script. It runs
`python -m agentledger`, agentledger's public command, and imports nothing private of agentledger's.
"""

import runpy

if __name__ == "__main__":
    runpy.run_module("agentledger", run_name="__main__", alter_sys=True)
