"""Sessions: a run that stays open after its answer, on the real stack.

A session answers its task, waits for the next message holding no worker, answers it as a
new turn, and so on; a worker killed (SIGKILL) in the middle of a turn loses nothing; every
`compact_after_turns` turns the older turns are summarised by a model call and the run
continues as new, the model reading the summary and the recent turns while the mirror keeps
every word; idle for its `idle_timeout`, it completes with a receipt that has a section per
turn. `agentledger chat` does the same from a pipe. A session of 1,000 messages of 20,000
characters runs on, carrying a bounded state across its continuations.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import sys
from typing import Any

import pytest

from agentledger import RunClient
from agentledger.activities.model import SUMMARY_PROMPT
from agentledger.cli.render import receipt_markdown
from agentledger.core.errors import NotAnswered, OperationRefused, RunNotFound
from agentledger.core.messages import RunMessages
from agentledger.core.wire import ControlInput, SayInput
from agentledger.dev.offline_model import OfflineModelServer, Reply, completion
from agentledger.workflows import AgentRunWorkflow, sessions
from tests import client_ops as ops
from tests import client_ops as steering_ops
from tests.recorded import replayer
from tests.support import eventually, make_spec, rows, wait_pending
from tests.test_crash_recovery import ROOT, start_worker_process

TASK = "Tell me about refunds."
SECOND = "What about exchanges?"
THIRD = "And gift cards?"
SUMMARY = "They asked about refunds and were told the policy."


def is_summary_call(request: dict[str, Any]) -> bool:
    first = request["messages"][0]
    return first["role"] == "system" and first["content"] == SUMMARY_PROMPT


def session_model(slow: str | None = None, seconds: float = 0.0) -> Any:
    """Answers the last user message by name (slowly for `slow`); summarises when asked."""

    def respond(request: dict[str, Any]) -> Reply:
        if is_summary_call(request):
            return completion(request, content=SUMMARY)
        asked = [m["content"] for m in request["messages"] if m["role"] == "user"][-1]
        reply = completion(request, content=f"## Summary\nAnswer to: {asked}")
        if slow is not None and slow in asked:
            reply.delay_seconds = seconds
        return reply

    return respond


def spec(**session: Any) -> Any:
    return make_spec(
        TASK,
        allowed_tools=[],
        session={"idle_timeout": 8, **session},
        timeouts={"heartbeat_seconds": 2, "initial_retry_seconds": 0.2},
    )


async def answered(client, run_id: str, turns: int, seconds: float = 60) -> Any:
    async def probe() -> Any:
        try:
            state = await ops.status(client, run_id)
        except NotAnswered:  # the killed worker's sticky queue: the server moves on soon
            return None
        done = [t for t in state.turns if t.answered_at is not None]
        return state if len(done) >= turns and state.status.value == "waiting_for_message" else None

    return await eventually(probe, seconds=seconds, what=f"turn {turns} to be answered")


def user_texts(request: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in request["messages"] if m["role"] == "user"]


async def test_a_session_answers_three_turns_across_a_sigkill_and_a_compaction(
    client, settings, pool, worker
):
    with OfflineModelServer(session_model(slow=SECOND, seconds=6)) as model:
        local = settings.model_copy(update={"openai_base_url": model.base_url})
        doomed = await start_worker_process(local, "doomed")
        try:
            started = await ops.start_run(
                client, spec(compact_after_turns=2), task_queue=settings.task_queue
            )
            run_id = started.run_id
            first = await answered(client, run_id, 1)
            assert first.result == f"## Summary\nAnswer to: {TASK}"
            # Idle: once the mirror has the answer, nothing is scheduled and no worker held.
            await eventually(lambda: _nothing_pending(client, run_id), what="an idle session")
            said = await steering_ops.say(client, run_id, SECOND, by="ana")
            assert said.delivered == "accepted"
            await eventually(
                lambda: _asked(model, SECOND), what="the second turn's (slow) model call"
            )
            doomed.send_signal(signal.SIGKILL)
            assert await asyncio.wait_for(doomed.wait(), 30) == -signal.SIGKILL
        finally:
            if doomed.returncode is None:
                doomed.kill()
                await doomed.wait()
        async with worker(base_url=model.base_url):
            second = await answered(client, run_id, 2, seconds=90)
            assert second.result == f"## Summary\nAnswer to: Message from ana: {SECOND}"
            # The session compacted while idle and continued as new.
            await eventually(lambda: _summarised(client, run_id), seconds=60, what="the compaction")
            await steering_ops.say(client, run_id, THIRD, by="ana")
            third = await answered(client, run_id, 3)
            assert third.result == f"## Summary\nAnswer to: Message from ana: {THIRD}"
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, run_id)
            result = await asyncio.wait_for(handle.result(), 60)  # idle: it completes
            history = await handle.fetch_history()
    await replayer([AgentRunWorkflow]).replay_workflow(history)
    assert result.status.value == "completed"
    assert result.answer == third.result

    # The summary call read turn 1; the third turn read the summary and turn 2, not turn 1.
    [summary_call] = [r for r in model.requests if is_summary_call(r)]
    assert TASK in summary_call["messages"][1]["content"]
    assert SECOND not in summary_call["messages"][1]["content"]
    last = [r for r in model.requests if not is_summary_call(r)][-1]
    assert any(SUMMARY in str(m["content"]) for m in last["messages"] if m["role"] == "system")
    assert not any(TASK in t for t in user_texts(last)), "turn 1 is in the summary only"
    assert any(SECOND in t for t in user_texts(last)) and THIRD in user_texts(last)[-1]

    receipt = await ops.receipt(pool, run_id)
    assert receipt["outcome"] == "completed" and receipt["summaries"] == 1
    markdown = receipt_markdown(receipt)
    assert all(f"## Turn {n}" in markdown for n in (1, 2, 3)), markdown
    turns = receipt["turns"]
    assert [t["turn"] for t in turns] == [1, 2, 3]
    assert [t["asked"] for t in turns] == [TASK, f"{SECOND}", f"{THIRD}"]
    assert [t["answer"] for t in turns] == [first.result, second.result, third.result]
    assert all(t["model_calls"] >= 1 and t["tokens"] > 0 for t in turns), turns
    assert turns[0]["message_ids"] == [] and turns[1]["message_ids"] == [said.message_id]
    # The mirror keeps every word: the whole conversation, and each answer in its step.
    stored = await rows(
        pool, "SELECT message FROM conversation WHERE run_id = %s ORDER BY idx", run_id
    )
    words = [str(r["message"].get("content")) for r in stored]
    for text in (TASK, SECOND, THIRD, first.result, second.result):
        assert any(text in w for w in words), text
    steps = await rows(
        pool,
        "SELECT name, output FROM steps WHERE run_id = %s AND type = 'model_call' AND final "
        "ORDER BY seq",
        run_id,
    )
    assert [s["output"]["content"] for s in steps if s["name"] == "summary"] == [SUMMARY]
    kinds = [
        r["type"]
        for r in await rows(pool, "SELECT type FROM events WHERE run_id = %s ORDER BY seq", run_id)
    ]
    assert kinds.count("session.turn_answered") == 3
    assert "run.continued_as_new" in kinds and "session.compacted" in kinds
    report = await ops.check_mirror(client, pool, run_id)
    assert report["agrees"], report["differences"]


LONG_MESSAGES = 1000
MESSAGE_CHARS = 20_000  # the most `say` takes
BATCH = 25
COMPACT_AFTER_TURNS = 4
# What a continuation of the session carries besides the messages waiting for the next model
# call (said since the last, whole), while 20 MB are said to it: windows of its latest turns
# and messages, and its live stream's last items (agentledger/workflows/run_stream.py).
CARRY_BOUND = 400_000


def terse_model(request: dict[str, Any]) -> Reply:
    """Answers in a few words however long the conversation (a summary when asked)."""
    if is_summary_call(request):
        return completion(request, content=SUMMARY)
    return completion(request, content=f"## Summary\nnoted {len(user_texts(request))} messages")


async def test_a_session_of_1000_messages_of_20_kb_runs_on_carrying_a_bounded_state(
    client, settings, pool, worker
):
    with OfflineModelServer(terse_model) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(
                client,
                spec(compact_after_turns=COMPACT_AFTER_TURNS, idle_timeout=60),
                task_queue=settings.task_queue,
            )
            run_id = started.run_id
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, run_id)
            await answered(client, run_id, 1)
            for first in range(0, LONG_MESSAGES, BATCH):
                await asyncio.gather(
                    *(
                        handle.signal(
                            RunMessages.SAY.kept_signal,
                            SayInput(message_id=f"m{n:04d}", text=long_text(n), by="ana"),
                        )
                        for n in range(first, first + BATCH)
                    )
                )
                await eventually(
                    functools.partial(_all_taken, handle, first + BATCH),
                    seconds=60,
                    what="the batch's turn",
                )
            await handle.signal(RunMessages.END_SESSION.kept_signal, ControlInput(by="test"))
            result = await asyncio.wait_for(handle.result(), 60)
    assert result.status.value == "completed"
    carries = await _carried_sizes(client, run_id)
    assert len(carries) >= 5, "the session continued as new several times"
    assert max(carries) < CARRY_BOUND, carries

    # Nothing is lost: the mirror has every message whole, and the receipt counts them.
    said = await rows(
        pool,
        "SELECT message->>'content' AS content FROM conversation "
        "WHERE run_id = %s AND message->>'content' LIKE 'Message from ana: %%' ORDER BY idx",
        run_id,
    )
    assert sorted(r["content"] for r in said) == [  # a batch's signals arrive in any order
        f"Message from ana: {long_text(n)}" for n in range(LONG_MESSAGES)
    ]
    receipt = await ops.receipt(pool, run_id)
    left = receipt["left_in_mirror"]
    assert left["messages"] + len(receipt["messages"]) == LONG_MESSAGES
    assert left["turns"] > 0 and left["steps"] > 0
    turns = [t["turn"] for t in receipt["turns"]]
    assert turns == list(range(left["turns"] + 1, left["turns"] + len(turns) + 1))
    assert "the mirror has them" in receipt_markdown(receipt)


def long_text(n: int) -> str:
    return f"message {n:04d} " + "x" * (MESSAGE_CHARS - 13)


async def _all_taken(handle: Any, said: int) -> bool:
    """Every message said so far was taken by a turn that has answered."""
    state = await handle.query(AgentRunWorkflow.state)
    return (
        state.status.value == "waiting_for_message"
        and state.left_in_mirror.messages + len(state.messages) == said
        and all(m.taken_at is not None for m in state.messages)
    )


async def _carried_sizes(client, run_id: str) -> list[int]:
    """The encoded size of each continuation's input (the state it carried), less the
    messages in it waiting whole for the next model call."""
    sizes = []
    async for run in client.list_workflows(f"WorkflowId = '{run_id}'"):
        history = client.get_workflow_handle(run_id, run_id=run.run_id)
        async for event in history.fetch_history_events(page_size=1):
            started = event.workflow_execution_started_event_attributes
            if started.continued_execution_run_id:
                [payload] = started.input.payloads
                carry = json.loads(payload.data)["carry"]
                waiting = [m for m in carry["messages"] if not m["taken_at"]]
                assert len(carry["messages"]) - len(waiting) <= sessions.MESSAGES_CARRIED
                assert len(carry["turns"]) <= sessions.TURNS_CARRIED + COMPACT_AFTER_TURNS
                assert len(waiting) <= BATCH
                sizes.append(len(payload.data) - sum(len(json.dumps(m)) for m in waiting))
            break
    return sizes


async def test_an_idle_session_completes_and_then_refuses_messages(client, settings, pool, worker):
    with OfflineModelServer(session_model()) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(
                client, spec(idle_timeout="2s"), task_queue=settings.task_queue
            )
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            result = await asyncio.wait_for(handle.result(), 60)
            with pytest.raises(OperationRefused, match="has already ended"):
                await steering_ops.say(client, started.run_id, "hello?")
    assert result.status.value == "completed"
    assert result.answer == f"## Summary\nAnswer to: {TASK}"
    receipt = await ops.receipt(pool, started.run_id)
    assert [t["turn"] for t in receipt["turns"]] == [1]
    assert receipt["turns"][0]["answered_at"] <= receipt["finished_at"]


async def test_a_session_is_cancelled_while_idle(client, settings, pool, worker):
    with OfflineModelServer(session_model()) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(
                client, spec(idle_timeout="1h"), task_queue=settings.task_queue
            )
            await answered(client, started.run_id, 1)
            await ops.cancel(client, started.run_id)
            receipt = await eventually(
                lambda: _receipt(pool, started.run_id), what="the cancelled session's receipt"
            )
    assert receipt["outcome"] == "cancelled" and len(receipt["turns"]) == 1


async def test_run_client_chat_streams_the_answer_and_hides_other_tenants(
    client, settings, pool, worker
):
    with OfflineModelServer(session_model()) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, spec(), task_queue=settings.task_queue)
            await answered(client, started.run_id, 1)
            async with RunClient(client, settings) as run_client:
                items = [
                    i async for i in run_client.sessions.chat(started.run_id, SECOND, by="ana")
                ]
            foreign = settings.model_copy(update={"tenant": "someone-else"})
            async with RunClient(client, foreign) as theirs:
                with pytest.raises(RunNotFound):
                    [i async for i in theirs.sessions.chat(started.run_id, "hi")]
            await ops.cancel(client, started.run_id)
    kinds = [i.type for i in items]
    assert kinds[0] == "chat.said" and kinds[-1] == "session.turn_answered", kinds
    assert kinds[1] == "message.received" and "message.taken" in kinds, kinds
    assert items[-1].data["answer"] == f"## Summary\nAnswer to: Message from ana: {SECOND}"
    text = "".join(i.text or "" for i in items if i.kind == "text")
    assert SECOND in text, "the answer streamed as the model wrote it"


async def test_chat_from_a_pipe_through_the_console_script(
    client, settings, pool, worker, tmp_path
):
    with OfflineModelServer(session_model()) as model:
        async with worker(base_url=model.base_url):
            # Idle for a minute at most: a loaded machine's console script takes seconds to start.
            started = await ops.start_run(
                client, spec(idle_timeout=60), task_queue=settings.task_queue
            )
            await answered(client, started.run_id, 1)
            code, out, err = await chat_cli(
                settings, tmp_path, started.run_id, f"{SECOND}\n\n{THIRD}\n/exit\nignored\n"
            )
            state = await ops.status(client, started.run_id)
            await ops.cancel(client, started.run_id)
    assert code == 0, err
    assert f"Answer to: Message from cli: {SECOND}" in out
    assert f"Answer to: Message from cli: {THIRD}" in out
    assert [t.turn for t in state.turns] == [1, 2, 3], "nothing after /exit was said"


def sending_model(request: dict[str, Any]) -> Reply:
    """Answers plainly, but a message asking to notify someone sends a message first."""
    messages = request["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    if "notify" in str(messages[last_user]["content"]):
        if not any(m["role"] == "tool" for m in messages[last_user:]):
            args = {"to": "ana@example.com", "subject": "Refunds", "body": "Hello."}
            return completion(request, tool_calls=[("send_message", args)])
        return completion(request, content="## Summary\nSent.\n## Actions\nsent it")
    return session_model()(request)


async def test_chat_shows_an_approval_inline_and_decides_it(
    client, settings, pool, worker, tmp_path
):
    with OfflineModelServer(sending_model) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(
                client,
                make_spec(
                    TASK,
                    allowed_tools=["send_message"],
                    session={"idle_timeout": 30},
                    timeouts={"heartbeat_seconds": 2, "initial_retry_seconds": 0.2},
                ),
                task_queue=settings.task_queue,
            )
            await answered(client, started.run_id, 1)
            code, out, err = await chat_cli(
                settings, tmp_path, started.run_id, "please notify ana\n/approve\n"
            )
            state = await ops.status(client, started.run_id)
            await ops.cancel(client, started.run_id)
    assert code == 0, err
    assert "[approval needed: send_message" in out
    assert f"agentledger approve {started.run_id}" in out and "type /approve" in out
    assert "[approved: the run is" in out
    assert "Sent." in out.split("[approved")[1], "the turn went on to its answer"
    assert [a.decision for a in state.decided] == ["approved"] and len(state.turns) == 2
    assert state.turns[1].answer == "## Summary\nSent.\n## Actions\nsent it"


async def test_chat_to_a_turn_held_by_an_approval_says_so_at_once(client, settings, worker):
    """The approval was asked before the message: chat reports it pending without waiting."""
    with OfflineModelServer(sending_model) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(
                client,
                make_spec(
                    "please notify ana",
                    allowed_tools=["send_message"],
                    session={"idle_timeout": 30},
                ),
                task_queue=settings.task_queue,
            )
            await wait_pending(client, started.run_id)
            async with RunClient(client, settings) as run_client:
                begun = asyncio.get_running_loop().time()
                items = [i async for i in run_client.sessions.chat(started.run_id, "still there?")]
                took = asyncio.get_running_loop().time() - begun
            await ops.cancel(client, started.run_id)
    assert [i.type for i in items] == ["chat.said", "message.received", "chat.approval_pending"]
    assert items[-1].data["tool"] == "send_message" and took < 10, (items[-1], took)
    assert items[-1].data["next_offset"] == (items[1].offset or 0) + 1


async def test_chat_with_no_worker_says_so_and_exits(client, settings, tmp_path):
    started = await ops.start_run(client, spec(), task_queue=settings.task_queue)
    try:
        code, _, err = await chat_cli(settings, tmp_path, started.run_id, "hello\n", "--wait", "2")
    finally:
        await client.get_workflow_handle(started.run_id).terminate("test over")
    assert code == 1
    assert "no worker answered within 2s" in err and "agentledger-worker" in err


async def test_a_session_ended_while_idle_completes_at_once_and_chat_ends_one(
    client, settings, pool, worker, tmp_path
):
    with OfflineModelServer(session_model()) as model:
        async with worker(base_url=model.base_url):
            runs_ = [
                (await ops.start_run(client, spec(idle_timeout="1h"), task_queue=q)).run_id
                for q in (settings.task_queue, settings.task_queue)
            ]
            first = await answered(client, runs_[0], 1)
            async with RunClient(client, settings) as run_client:
                ended = await run_client.sessions.end(runs_[0], by="ana")
                handle = client.get_workflow_handle_for(AgentRunWorkflow.run, runs_[0])
                result = await asyncio.wait_for(handle.result(), 30)
                with pytest.raises(OperationRefused, match="already ended") as again:
                    await run_client.sessions.end(runs_[0])
            await answered(client, runs_[1], 1)
            code, out, err = await chat_cli(
                settings, tmp_path, runs_[1], f"{SECOND}\n/end\nignored\n"
            )
            chatted = await asyncio.wait_for(
                client.get_workflow_handle_for(AgentRunWorkflow.run, runs_[1]).result(), 30
            )
            history = await handle.fetch_history()
    await replayer([AgentRunWorkflow]).replay_workflow(history)
    assert "ends now" in ended.message, ended
    assert result.status.value == "completed" and result.answer == first.result
    assert again.value.exit_code == 5 and "agentledger receipt" in str(again.value)
    receipt = await eventually(lambda: _receipt(pool, runs_[0]), what="the ended session's receipt")
    assert receipt["outcome"] == "completed" and [t["turn"] for t in receipt["turns"]] == [1]
    kinds = await _event_types(pool, runs_[0])
    assert "session.end_requested" in kinds
    assert code == 0, err
    assert f"Answer to: Message from cli: {SECOND}" in out and "[the session ends now" in out
    assert chatted.status.value == "completed"
    assert chatted.answer == f"## Summary\nAnswer to: Message from cli: {SECOND}"


async def test_a_session_ended_during_a_turn_completes_with_that_turns_answer(
    client, settings, pool, worker
):
    with OfflineModelServer(session_model(slow=SECOND, seconds=3)) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(
                client, spec(idle_timeout="1h"), task_queue=settings.task_queue
            )
            await answered(client, started.run_id, 1)
            await steering_ops.say(client, started.run_id, SECOND, by="ana")
            await eventually(lambda: _asked(model, SECOND), what="the second turn's model call")
            ended = await steering_ops.end_session(client, started.run_id, by="ana")
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            result = await asyncio.wait_for(handle.result(), 30)
    assert "when its current turn has answered" in ended.message, ended
    assert result.status.value == "completed"
    assert result.answer == f"## Summary\nAnswer to: Message from ana: {SECOND}"
    receipt = await eventually(lambda: _receipt(pool, started.run_id), what="its receipt")
    assert [t["answer"] for t in receipt["turns"]][-1] == result.answer
    assert len(receipt["turns"]) == 2


async def test_an_end_sent_with_no_worker_is_held_until_one_returns(client, settings, pool, worker):
    with OfflineModelServer(session_model()) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(
                client, spec(idle_timeout="1h"), task_queue=settings.task_queue
            )
            first = await answered(client, started.run_id, 1)
        ended = await steering_ops.end_session(client, started.run_id, by="ana", wait=3)
        handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
        assert (await handle.describe()).status is not None
        async with worker(base_url=model.base_url):
            result = await asyncio.wait_for(handle.result(), 60)
    assert ended.message.startswith("recorded: no worker answered"), ended
    assert "agentledger-worker" in ended.message
    assert result.status.value == "completed" and result.answer == first.result


async def test_end_is_refused_for_a_run_that_is_not_a_session_and_another_tenants(
    client, settings, tmp_path
):
    plain = await ops.start_run(client, make_spec(TASK), task_queue=settings.task_queue)
    session = await ops.start_run(client, spec(), task_queue=settings.task_queue)
    try:
        code, out, err = await agentledger_cli(settings, tmp_path, "end", plain.run_id, "--json")
        foreign = settings.model_copy(update={"tenant": "someone-else"})
        async with RunClient(client, foreign) as theirs:
            with pytest.raises(RunNotFound) as missing:
                await theirs.sessions.end(session.run_id, wait=3)
    finally:
        for run_id in (plain.run_id, session.run_id):
            await client.get_workflow_handle(run_id).terminate("test over")
    assert code == 5, (out, err)
    refusal = json.loads(err.strip().splitlines()[-1])["error"]
    assert (refusal["code"], refusal["kind"]) == (5, "refused"), refusal
    assert "is not a session" in refusal["message"]
    assert f"agentledger cancel {plain.run_id}" in refusal["message"]
    assert missing.value.exit_code == 3


async def test_a_pause_while_idle_shows_paused_holds_a_message_and_resume_takes_it(
    client, settings, pool, worker
):
    with OfflineModelServer(session_model()) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(
                client, spec(idle_timeout="3s"), task_queue=settings.task_queue
            )
            run_id = started.run_id
            await answered(client, run_id, 1)
            await ops.control(client, run_id, "pause", by="ana")
            paused = await eventually(
                lambda: _status_is(client, run_id, "paused"), what="the idle session paused"
            )
            async with RunClient(client, settings) as run_client:  # chat says why no answer comes
                items = [i async for i in run_client.sessions.chat(run_id, SECOND, by="bo")]
            await asyncio.sleep(4)  # past the idle timeout: a paused session stays open
            held = await ops.status(client, run_id)
            await ops.control(client, run_id, "resume", by="ana")
            second = await answered(client, run_id, 2)
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, run_id)
            result = await asyncio.wait_for(handle.result(), 30)  # idle again: it completes
            history = await handle.fetch_history()
    await replayer([AgentRunWorkflow]).replay_workflow(history)
    assert paused.pause_reason is not None and "ana" in paused.pause_reason, paused
    assert items[0].data["delivered"] == "accepted", items
    assert items[-1].type == "chat.no_answer" and items[-1].data["reason"] == "paused", items
    assert "agentledger resume" in items[-1].data["note"] and "ana" in items[-1].data["note"]
    assert held.status.value == "paused" and len(held.turns) == 1
    assert [m.taken_at for m in held.messages] == [None], "the message waits for the resume"
    assert second.result == f"## Summary\nAnswer to: Message from bo: {SECOND}"
    assert second.pause_reason is None
    assert result.status.value == "completed" and result.answer == second.result
    kinds = await _event_types(pool, run_id)
    assert "run.paused" in kinds and "run.resumed" in kinds


async def chat_cli(settings, home, run_id: str, lines: str, *flags: str) -> tuple[int, str, str]:
    """`agentledger chat RUN` (the console script) with `lines` piped to its stdin."""
    return await agentledger_cli(settings, home, "chat", run_id, *flags, stdin=lines)


async def agentledger_cli(settings, home, *args: str, stdin: str = "") -> tuple[int, str, str]:
    """The `agentledger` console script with `args`, `stdin` piped to it."""
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "DATABASE_URL": settings.database_url or "",
        "AGENTLEDGER_TASK_QUEUE": settings.task_queue,
        "AGENTLEDGER_HOME": str(home),
    }
    script = os.path.join(os.path.dirname(sys.executable), "agentledger")
    proc = await asyncio.create_subprocess_exec(
        script,
        *args,
        cwd=ROOT,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _asked(model: OfflineModelServer, text: str) -> bool:
    return any(text in t for r in model.requests for t in user_texts(r))


async def _summarised(client, run_id: str) -> bool:
    state = await ops.status(client, run_id)
    return any(s.name == "summary" and s.status == "completed" for s in state.steps)


async def _receipt(pool, run_id: str) -> dict[str, Any] | None:
    try:
        return await ops.receipt(pool, run_id)
    except ops.OperationError:
        return None


async def _nothing_pending(client, run_id: str) -> bool:
    raw = (await client.get_workflow_handle(run_id).describe()).raw_description
    return not raw.pending_activities and not raw.HasField("pending_workflow_task")


async def _status_is(client, run_id: str, status: str) -> Any:
    state = await ops.status(client, run_id)
    return state if state.status.value == status else None


async def _event_types(pool, run_id: str) -> list[str]:
    found = await rows(pool, "SELECT type FROM events WHERE run_id = %s ORDER BY seq", run_id)
    return [r["type"] for r in found]
