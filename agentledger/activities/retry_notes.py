"""A retried step says why, on the run's live stream: `watch` shows `step.retry` with the
reason the attempt before it ended (read from the attempts journal). One signal per retried
attempt; a note that cannot be sent is dropped, never a reason to fail the step."""

from __future__ import annotations

import logging

from temporalio import activity
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from agentledger.activities.agent_spans import note_retry_reason
from agentledger.core.constants import STREAM_TOPIC_RETRIES
from agentledger.core.wire import RetryNote
from agentledger.store.mirror_store import MirrorStore

log = logging.getLogger(__name__)


async def announce_retry(store: MirrorStore, run_id: str, step_id: str) -> None:
    attempt = activity.info().attempt
    if attempt <= 1 or activity.info().workflow_id is None:
        return
    try:
        reason = await store.attempt_outcome(run_id, step_id, attempt - 1)
        note_retry_reason(reason)  # on the attempt's span too
        client = WorkflowStreamClient.from_within_activity()
        client.topic(STREAM_TOPIC_RETRIES, type=RetryNote).publish(
            RetryNote(step_id=step_id, attempt=attempt, reason=reason)
        )
        await client.flush()
    except Exception as err:  # the step goes on; only a watcher misses the note
        log.warning("retry of %s not announced: %s", step_id, err)
