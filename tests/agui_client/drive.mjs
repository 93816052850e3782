// The official AG-UI client (@ag-ui/client, as CopilotKit front ends use it) against
// agentledger's AG-UI endpoint: run the thread to its approval interrupt with a runner's key,
// then resume it with an approver's key and an edit, to RUN_FINISHED. `runAgent` applies the
// client's own event verification and enforcement to every event it reads.
//
// node drive.mjs URL RUNNER_KEY APPROVER_KEY TASK EDIT_JSON
// prints one JSON object: what each AG-UI run ended with, and the events it read.
import { HttpAgent, buildResumeArray } from "@ag-ui/client";

const [url, runnerKey, approverKey, task, editJson] = process.argv.slice(2);

const agent = new HttpAgent({
  url,
  headers: { Authorization: `Bearer ${runnerKey}` },
  initialMessages: [{ id: "m1", role: "user", content: task }],
});

function recorder() {
  const run = { events: [], finished: null, errors: [] };
  const subscriber = {
    onEvent({ event }) {
      run.events.push(event.type);
    },
    onRunFinishedEvent(params) {
      run.finished = { outcome: params.outcome, result: params.result ?? null };
    },
    onRunErrorEvent({ event }) {
      run.errors.push(event.message);
    },
  };
  return { run, subscriber };
}

const first = recorder();
await agent.runAgent({}, first.subscriber);
const interrupts = agent.pendingInterrupts;
if (interrupts.length !== 1) {
  throw new Error(`expected one interrupt, got ${JSON.stringify(interrupts)}`);
}
const [interrupt] = interrupts;

agent.headers = { Authorization: `Bearer ${approverKey}` };
const resume = buildResumeArray(interrupts, {
  [interrupt.id]: {
    status: "resolved",
    payload: { approved: true, editedArgs: JSON.parse(editJson) },
  },
});
const second = recorder();
const done = await agent.runAgent({ resume }, second.subscriber);

console.log(
  JSON.stringify({
    threadId: agent.threadId,
    interrupt,
    first: first.run,
    second: second.run,
    result: done.result ?? null,
    pendingAfter: agent.pendingInterrupts,
    messages: agent.messages.map((m) => m.role),
  }),
);
