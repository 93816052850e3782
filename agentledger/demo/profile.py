"""The demo's agent profile, in Python (a YAML file works as well: README "Your agent in five
minutes")."""

from agentledger import Agent

support_desk = Agent(
    name="support-desk",
    instructions=(
        "You are a careful agent. Use the tools you are given when they help, one step at a "
        "time. When the task is done, reply with a final answer in Markdown that starts with "
        "a '## Summary' section."
    ),
    tools=["create_ticket", "fetch_page", "index_documents", "search_notes", "send_message"],
)

agents = [support_desk]
