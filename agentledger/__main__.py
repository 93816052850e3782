"""`python -m agentledger ...`: the `agentledger` command line."""

from agentledger.cli.console import console

if __name__ == "__main__":
    console()
