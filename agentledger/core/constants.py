"""Names that are part of the deployed contract: never rename one once runs use it."""

from typing import Literal

TASK_QUEUE = "agent-runs"
WORKFLOW_NAME = "AgentRun"
RUN_ID_PREFIX = "run-"
# The Worker Deployment that versioned workers (AGENTLEDGER_BUILD_ID) belong to.
DEPLOYMENT_NAME = "agentledger"

# Activity names are stable and namespaced (a rename breaks in-flight runs).
ACTIVITY_MODEL_COMPLETE = "model.complete"
ACTIVITY_TOOL_INVOKE = "tool.invoke"
ACTIVITY_CHECKPOINT_SAVE = "checkpoint.save"
ACTIVITY_VERIFY_CHECK = "verify.check"
ACTIVITY_MIRROR_SYNC = "mirror.sync"
ACTIVITY_RECEIPT_RECORD = "receipts.record"
ACTIVITY_MIRROR_FINISH = "mirror.finish"
ACTIVITY_FORK_SEED = "fork.seed"
ACTIVITY_RUN_CANCEL_OWN = "run.cancel_own"

# Workflow message names.
QUERY_STATE = "state"
QUERY_PENDING_APPROVAL = "pending_approval"
UPDATE_APPROVE = "approve"
UPDATE_REJECT = "reject"
UPDATE_PAUSE = "pause"
UPDATE_RESUME = "resume"
SIGNAL_APPROVE = "approve_signal"
SIGNAL_REJECT = "reject_signal"
SIGNAL_PAUSE = "pause_signal"
SIGNAL_RESUME = "resume_signal"
# A person's message to a run in flight (`agentledger say`): a signal, so it is kept with no
# worker running, as a decision is.
SIGNAL_SAY = "say_signal"
# Ending a session on purpose (`agentledger end`): an update a worker answers, else a signal kept.
UPDATE_END_SESSION = "end_session"
SIGNAL_END_SESSION = "end_session_signal"
# A sub-agent is offered to the model as this tool name plus its agent's name.
SUBAGENT_TOOL_PREFIX = "agent__"
# A sub-agent's run tells its parent of an approval it waits for.
SIGNAL_CHILD_APPROVAL = "subagent_approval_signal"

# The run's live stream (temporalio.contrib.workflow_streams): the workflow publishes its
# events, the model activity the text as the provider streams it (the workflow its rest).
STREAM_TOPIC_EVENTS = "events"
STREAM_TOPIC_TEXT = "text"
STREAM_TOPIC_RETRIES = "retries"

# A tool message that names a step instead of quoting its output: the model activity reads
# the output from the step's mirror row, so history does not carry it twice. Histories hold it,
# so it keeps the project's first name: open runs' histories name it.
STEP_OUTPUT_REF = "agentrun_step_output"

OFFLINE_MODEL = "offline-planner"
OFFLINE_MODEL_PRICE = (0.15, 0.60)  # USD per million tokens in and out, for cost figures

# The local stack's ports, defined here alone: the default address, the UI, `up --port`.
TEMPORAL_PORT = 7233
WEB_UI_PORT = 8233
DEFAULT_TEMPORAL_ADDRESS = f"localhost:{TEMPORAL_PORT}"
DEFAULT_WEB_UI = f"http://localhost:{WEB_UI_PORT}"

# Backlogs: one long-running workflow per agent hands each task to an AgentRun child.
BACKLOG_WORKFLOW_NAME = "AgentBacklog"
BACKLOG_ID_PREFIX = "backlog-"
ACTIVITY_BACKLOG_SYNC = "backlog.sync"
ACTIVITY_BACKLOG_LOAD = "backlog.load"
UPDATE_BACKLOG_ENQUEUE = "backlog.enqueue"
UPDATE_BACKLOG_STOP = "backlog.stop"
UPDATE_BACKLOG_RESUME = "backlog.resume"
UPDATE_BACKLOG_RETRY = "backlog.retry"
QUERY_BACKLOG_STATE = "backlog.state"
# The same writes as signals, which the server keeps in the backlog's history (and starts it
# with, signal-with-start) while no worker runs; the delivery query tells a sender the outcome.
SIGNAL_BACKLOG_ENQUEUE = "backlog.enqueue_signal"
SIGNAL_BACKLOG_STOP = "backlog.stop_signal"
SIGNAL_BACKLOG_RESUME = "backlog.resume_signal"
SIGNAL_BACKLOG_RETRY = "backlog.retry_signal"
QUERY_BACKLOG_DELIVERY = "backlog.delivery"

# Evals: one workflow per eval starts its cases' runs as its children.
EVAL_WORKFLOW_NAME = "AgentEval"
EVAL_ID_PREFIX = "eval-"
QUERY_EVAL_PROGRESS = "eval.progress"
ACTIVITY_EVAL_DIVERGED = "eval.diverged"

# Tenant admission: one workflow per capped tenant is a durable FIFO of its runs' starts.
ADMISSION_WORKFLOW_NAME = "TenantAdmission"
ADMISSION_ID_PREFIX = "admission-"
# What a long-lived workflow pinned to an old build says while it moves to the current one
# (it continues as new): the sender tries again and reaches it on the current build.
MOVING_TO_CURRENT_BUILD = "moving to the current build; try again"
ACTIVITY_ADMISSION_SYNC = "admission.sync"
ACTIVITY_ADMISSION_CLOSED = "admission.closed_runs"
# A run its parent started (a backlog's, a workflow's own) joins its tenant's queue.
ACTIVITY_ADMISSION_HOLD = "admission.hold"
# A tenant's policy, read for the runs a workflow starts (agentledger.core.tenant_policy).
ACTIVITY_TENANT_POLICY = "tenants.policy"
UPDATE_ADMISSION_HOLD = "admission.hold"
UPDATE_ADMISSION_ENQUEUE = "admission.enqueue"
UPDATE_ADMISSION_CONFIGURE = "admission.configure"
SIGNAL_ADMISSION_RELEASE = "admission.release"
# A start turned away while its queue moves wakes the queue with this, so the move happens now.
SIGNAL_ADMISSION_MOVE = "admission.move"
QUERY_ADMISSION_POSITION = "admission.position"
SIGNAL_RUN_ADMIT = "admit_signal"

# How long a command waits for Temporal or a worker before it says why no answer came.
DEFAULT_WAIT_SECONDS = 10.0
# The image `run_code` runs code in unless told otherwise (`agentledger sandbox build`).
SANDBOX_IMAGE = "agentledger-sandbox:latest"
# The demo's agent profiles: where a start by agent name looks when AGENTLEDGER_AGENTS names none.
DEMO_AGENTS = "agentledger.demo:agents"

# Signed webhooks (agentledger.activities.webhooks): one delivery, retried by Temporal; and
# the A2A task notifier that follows a run for one push subscription.
ACTIVITY_WEBHOOK_DELIVER = "webhooks.deliver"
ACTIVITY_STANDING_APPROVALS = "approvals.standing"
ACTIVITY_RUN_CHANGES = "webhooks.run_changes"
TASK_NOTIFIER_WORKFLOW_NAME = "TaskNotifier"
RUN_NOTIFIER_WORKFLOW_NAME = "RunNotifier"
# One recorded delivery made again, on request (`notifications redeliver`).
REDELIVERY_WORKFLOW_NAME = "WebhookRedelivery"
TASK_NOTIFIER_ID_PREFIX = "notify-"
# A tenant's webhooks with no run (`webhook_subscriptions.run_id` NULL): what a tenant-wide
# notice, such as a budget alert, is delivered to.
ACTIVITY_TENANT_SUBSCRIPTIONS = "webhooks.tenant_subscriptions"

# Schedules: a Temporal Schedule each, whose every fire is a ScheduledFire
# workflow that starts the run under its tenant's policy.
SCHEDULE_ID_PREFIX = "schedule-"
SCHEDULED_FIRE_WORKFLOW_NAME = "ScheduledFire"
SCHEDULED_FIRE_ID_PREFIX = "fire-"
ACTIVITY_SCHEDULE_RECORD_FIRE = "schedules.record_fire"

# Budgets above a run (agentledger.core.budgets): an alert's deliveries to the tenant's
# webhooks, one workflow per budget, period and kind.
BUDGET_ALERT_WORKFLOW_NAME = "BudgetAlert"
BUDGET_ALERT_ID_PREFIX = "budget-alert-"

# What a message said to a session while its turn is in flight does
# ("double-texting"), from the least disruptive to the most.
DoubleTexting = Literal["reject", "enqueue", "interrupt", "rollback"]
DOUBLE_TEXTING: tuple[DoubleTexting, ...] = ("reject", "enqueue", "interrupt", "rollback")
