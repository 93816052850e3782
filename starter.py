"""Start, steer and inspect agent runs: `python starter.py --help`, the same as `agentrun --help`.

The command line lives in the package (`agentrun.cli`); this file is the design card's entry
point for a checkout, so `python starter.py demo` works without installing the console script.
"""

from agentrun.cli.main import console

if __name__ == "__main__":
    console()
