"""Start, steer and inspect agent runs: `python starter.py --help`, the same as `agentrun --help`.

The command line lives in the package; this file is the design card's entry point for a
checkout, so `python starter.py demo` works without installing the console script. It runs
`python -m agentrun`, agentrun's public command, and imports nothing private of agentrun's.
"""

import runpy

if __name__ == "__main__":
    runpy.run_module("agentrun", run_name="__main__", alter_sys=True)
