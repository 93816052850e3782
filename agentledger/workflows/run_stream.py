"""The run's live stream: what `agentledger watch` follows.

The workflow publishes each event it records (`_event`) into a `WorkflowStream`; that costs
no history at all, since the log is workflow state rebuilt on replay. A model's text does
not come here: `model.complete` sends it to watchers over Postgres
(agentledger.store.model_text). The text topic stays for histories whose activities
published a reply's text here while the provider sent it (one signal per batch), the
workflow publishing the rest when it took the call's result (`streamed_chars`); replay
rebuilds the same log for them. Watchers read it with the stream's poll query, never its
long-poll update, so they take none of the run's update slots (agentledger.client.watch); the
update stays registered because the library registers it. At continue-as-new the
log goes along, cut to its last `RETAINED_ITEMS`, so the state a run carries stays bounded
however long it runs; offsets stay global.
"""

from __future__ import annotations

from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamState

from agentledger.core.constants import STREAM_TOPIC_EVENTS, STREAM_TOPIC_TEXT
from agentledger.core.streamed_text import rest_of_reply
from agentledger.core.wire import ModelCallResult, RunEvent, TextPiece

# Items a continuation carries; a watcher that asks for an older offset starts at the oldest
# one kept (the mirror still has every event).
RETAINED_ITEMS = 500


class RunStream:
    def __init__(self, prior: WorkflowStreamState | None) -> None:
        # Must be built from an `__init__` during the workflow's init (the SDK checks).
        self.stream = WorkflowStream(prior_state=prior)
        self.events = self.stream.topic(STREAM_TOPIC_EVENTS, type=RunEvent)
        self.text = self.stream.topic(STREAM_TOPIC_TEXT, type=TextPiece)

    def publish(self, event: RunEvent) -> None:
        self.events.publish(event)

    def publish_rest_of_reply(self, step_id: str, reply: ModelCallResult) -> None:
        """The part of a model's reply its activity did not stream, as one more piece of the
        same attempt's text. Only the result and the log decide it, so replay rebuilds the
        same log; and it adds no command, so it needs no `workflow.patched`. A result
        without `streamed_chars` came from an activity that streamed all of it itself."""
        if reply.streamed_chars is None:
            return
        text = rest_of_reply(reply.content, reply.streamed_chars)
        if text:
            self.text.publish(TextPiece(step_id=step_id, attempt=reply.attempt, text=text))

    def detach(self) -> None:
        """Release waiting watchers before the run returns or continues as new; they follow
        the run to its next generation, or read what is left once it has ended."""
        self.stream.detach_pollers()

    def carry(self) -> WorkflowStreamState:
        state = self.stream.get_state()
        end = state.base_offset + len(state.log)
        if len(state.log) <= RETAINED_ITEMS:
            return state
        self.stream.truncate(end - RETAINED_ITEMS)
        return self.stream.get_state()
