"""How much of a model's reply watchers get, shared by the two that publish it.

`model.complete` streams the text that is due while the provider is still sending; the
workflow publishes what the activity had not sent when it took the call's result. Both
spend one budget per reply, so a watcher sees the same text, cut the same way, whichever of
them sent its last piece.
"""

from __future__ import annotations

# Watchers get this much of a reply's text, at most: it goes into the run's stream (workflow
# state, carried at continue-as-new) and into each watcher's poll results, which Temporal
# caps in size. The step's output in the mirror has the whole reply.
MAX_STREAMED_CHARS = 32_000


def within_budget(text: str, already_streamed: int) -> tuple[str, int]:
    """The part of `text` that still fits after `already_streamed` characters, and how many
    characters of it do not."""
    kept = text[: max(0, MAX_STREAMED_CHARS - already_streamed)]
    return kept, len(text) - len(kept)


def not_streamed_note(dropped: int) -> str:
    return f"\n[{dropped:,} more characters not streamed; the step has them all]"


def rest_of_reply(content: str | None, streamed_chars: int) -> str:
    """What a watcher has not yet seen of a reply whose first `streamed_chars` characters
    the activity streamed: the rest within the budget, and the note when it was cut."""
    kept, dropped = within_budget((content or "")[streamed_chars:], streamed_chars)
    return kept + not_streamed_note(dropped) if dropped else kept
