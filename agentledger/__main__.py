"""`python -m agentledger ...`: the `agentledger` command line."""

from agentledger.cli.main import console

if __name__ == "__main__":
    console()
