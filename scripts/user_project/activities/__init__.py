"""The user's own activities, and the agent tools built on them."""

OWNER = "the user's project"
