"""`python -m agentrun ...`: the `agentrun` command line."""

from agentrun.cli.main import console

if __name__ == "__main__":
    console()
