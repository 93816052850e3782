#!/usr/bin/env bash
# The wheel, tested where users live (issue 26): build it, install it into a fresh virtual
# environment inside a folder that holds a user's own Temporal project (workflows/,
# activities/, worker.py, starter.py: scripts/user_project), and from there:
#   1. the wheel holds `agentledger` alone (and its py.typed); a lean install has no dev server;
#   2. `import agentledger; agentledger.RunClient` works beside the user's `workflows` package;
#   3. `agentledger demo` without the local extra says what to install, and exits 2 or 4;
#      `agentledger eval` without the evals extra names `pip install 'agentledger[evals]'`;
#   4. with `agentledger[local]`, `agentledger demo` completes;
#   5. the user's worker (agentledger.run_worker with their tool) and starter (RunClient: start,
#      approve, receipt) complete a run against `agentledger up --no-worker`;
#   6. a Temporal app of its own (tests/plugin_app: its workflow, codec and OpenTelemetry
#      plugin) with `AgentLedgerPlugin` on the same stack: its workflow runs an agent, approved
#      through `RunClient.on(client)`, that completes with its receipt; its histories replay
#      and every payload in them is sealed by the app's codec (tests/plugin_app/drive_shop.py).
# Installs reuse pip's cache, so in CI (after `.ci/run` installed the project) nothing is
# downloaded twice. Prints the wheel's size and the install times. Usage: scripts/wheel_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
PYTHON="${PYTHON:-python3}"

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do
        kill -INT "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

say() { echo "wheel_check: $*"; }
fail() {
    echo "wheel_check: FAILED: $*" >&2
    for log in "$WORK"/*.log; do
        [ -e "$log" ] && { echo "--- $log" >&2; tail -n 40 "$log" >&2; }
    done
    exit 1
}
free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
seconds_since() { "$PYTHON" -c "import time; print(f'{time.time() - $1:.0f}')"; }
now() { "$PYTHON" -c 'import time; print(time.time())'; }
# Wait up to $2 seconds for the file $1 to contain $3, while process $4 lives.
wait_for_line() {
    local file="$1" seconds="$2" text="$3" pid="$4" waited=0
    until grep -q -- "$text" "$file" 2>/dev/null; do
        kill -0 "$pid" 2>/dev/null || fail "$file: the process exited before saying '$text'"
        [ "$waited" -ge "$((seconds * 5))" ] && fail "$file: no '$text' within ${seconds}s"
        sleep 0.2
        waited=$((waited + 1))
    done
}

say "1. build the wheel"
"$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$WORK/dist" "$ROOT" >"$WORK/build.log" 2>&1 ||
    fail "pip wheel"
WHEEL="$(ls "$WORK"/dist/agentledger-*.whl)"
say "   $(basename "$WHEEL"): $(( $(stat -c %s "$WHEEL") / 1024 )) KiB"
"$PYTHON" - "$WHEEL" <<'EOF' || fail "the wheel's contents"
import sys, zipfile

names = zipfile.ZipFile(sys.argv[1]).namelist()
tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
assert tops == {"agentledger"}, f"the wheel installs more than agentledger: {sorted(tops)}"
assert "agentledger/py.typed" in names, "the wheel lacks agentledger/py.typed"
assert not any(n.startswith("agentledger/") and "/tests/" in n for n in names), "tests in the wheel"
print(f"wheel_check:    {len(names)} files, one import root (agentledger), py.typed shipped")
EOF

say "2. a user's project, a fresh venv, the lean install"
PROJECT="$WORK/project"
cp -r "$ROOT/scripts/user_project" "$PROJECT"
cd "$PROJECT"
"$PYTHON" -m venv "$WORK/venv"
VENV_PY="$WORK/venv/bin/python"
t0="$(now)"
"$VENV_PY" -m pip install --quiet "$WHEEL" >"$WORK/install.log" 2>&1 ||
    fail "pip install the wheel"
rm "$WORK/install.log"
say "   pip install agentledger (lean): $(seconds_since "$t0") s, venv $(du -sm "$WORK/venv" | cut -f1) MB"
# Only the venv's scripts and the project: nothing of the checkout (nor its venv) leaks in.
if [ -n "${VIRTUAL_ENV:-}" ]; then
    PATH="$(echo "$PATH" | tr ':' '\n' | grep -vxF "$VIRTUAL_ENV/bin" | paste -sd:)"
fi
export PATH="$WORK/venv/bin:$PATH"
unset PYTHONPATH VIRTUAL_ENV
export AGENTLEDGER_HOME="$WORK/home" AGENTLEDGER_TOOLS="" AGENTLEDGER_MCP=""
unset TEMPORAL_ADDRESS DATABASE_URL OPENAI_BASE_URL AGENTLEDGER_TASK_QUEUE
"$VENV_PY" - <<'EOF' || fail "import agentledger beside the user's workflows package"
import importlib.util, shutil, sys

import agentledger
import activities
import workflows

assert agentledger.RunClient.__name__ == "RunClient"
assert agentledger.run_worker is not None
assert workflows.OWNER == activities.OWNER == "the user's project", "not the user's packages"
assert agentledger.__file__.startswith(sys.prefix), f"agentledger from {agentledger.__file__}, not the venv"
assert importlib.util.find_spec("pgserver") is None, "the lean install has an embedded Postgres"
assert shutil.which("temporal") is None, f"the lean install has a Temporal dev server: {shutil.which('temporal')}"
print("wheel_check:    import agentledger; agentledger.RunClient: fine beside the user's workflows/")
EOF

say "3. agentledger demo without the local extra"
set +e
agentledger demo --port "$(free_port)" --ui-port "$(free_port)" >"$WORK/lean-demo.log" 2>&1
code=$?
set -e
case "$code" in 2 | 4) ;; *) fail "agentledger demo without the local extra exited $code, not 2 or 4" ;; esac
grep -q "pip install 'agentledger\[local\]'" "$WORK/lean-demo.log" ||
    fail "agentledger demo without the local extra does not say what to install"
say "   exit $code: $(grep -o "pip install 'agentledger\[local\]'" "$WORK/lean-demo.log" | head -1)"
rm "$WORK/lean-demo.log"
set +e
agentledger eval run cases.yaml --candidate support-desk --wait 5 >"$WORK/lean-eval.log" 2>&1
code=$?
set -e
[ "$code" = 2 ] || fail "agentledger eval without the evals extra exited $code, not 2"
grep -qx "error: this needs the \`evals\` extra (pydantic_evals is not installed): \`pip install 'agentledger\[evals\]'\`" "$WORK/lean-eval.log" ||
    fail "agentledger eval without the evals extra does not say, in one line, what to install"
say "   eval without its extra: exit 2, one line naming pip install 'agentledger[evals]'"
rm "$WORK/lean-eval.log"

say "4. agentledger[local], then agentledger demo"
t0="$(now)"
"$VENV_PY" -m pip install --quiet "$WHEEL[local]" >"$WORK/install.log" 2>&1 ||
    fail "pip install agentledger[local]"
rm "$WORK/install.log"
say "   pip install 'agentledger[local]': $(seconds_since "$t0") s more, venv $(du -sm "$WORK/venv" | cut -f1) MB"
t0="$(now)"
AGENTLEDGER_HOME="$WORK/demo-home" timeout 300 agentledger demo --port "$(free_port)" \
    --ui-port "$(free_port)" >"$WORK/demo.log" 2>&1 || fail "agentledger demo"
say "   agentledger demo: completed in $(seconds_since "$t0") s"
rm "$WORK/demo.log"

say "5. the user's worker and starter against agentledger up --no-worker"
agentledger up --no-worker --port "$(free_port)" --ui-port "$(free_port)" >"$WORK/up.log" 2>&1 &
PIDS+=($!)
wait_for_line "$WORK/up.log" 120 "stack up" "${PIDS[-1]}"
export AGENTLEDGER_TASK_QUEUE="user-runs"
"$VENV_PY" worker.py >"$WORK/worker.log" 2>&1 &
PIDS+=($!)
wait_for_line "$WORK/worker.log" 120 "polling" "${PIDS[-1]}"
timeout 180 "$VENV_PY" starter.py "$$" >"$WORK/starter.log" 2>&1 || fail "the user's starter"
say "   $(tail -n 1 "$WORK/starter.log")"

say "6. a Temporal app of its own with AgentLedgerPlugin, on the same stack"
"$VENV_PY" -m pip install --quiet "$WHEEL[otel]" >"$WORK/install.log" 2>&1 ||
    fail "pip install agentledger[otel]"
rm "$WORK/install.log"
SHOP="$WORK/shop"
mkdir "$SHOP"
cp -r "$ROOT/tests/plugin_app/shopapp" "$ROOT/tests/plugin_app/drive_shop.py" "$SHOP/"
# The stack's addresses, as `agentledger up` recorded them (the app reads its own variables).
read -r TEMPORAL_AT DATABASE_URL OPENAI_BASE_URL < <("$VENV_PY" -c '
import json, os, pathlib
stack = json.loads(pathlib.Path(os.environ["AGENTLEDGER_HOME"], "stack.json").read_text())
print(stack["temporal_address"], stack["database_url"], stack["openai_base_url"])')
SHOP_ENCRYPTION_KEY="$("$VENV_PY" -c 'import base64, os; print(base64.b64encode(os.urandom(32)).decode())')"
(cd "$SHOP" && DATABASE_URL="$DATABASE_URL" OPENAI_BASE_URL="$OPENAI_BASE_URL" \
    SHOP_ENCRYPTION_KEY="$SHOP_ENCRYPTION_KEY" SHOP_TASK_QUEUE="shop" \
    timeout 180 "$VENV_PY" drive_shop.py "$TEMPORAL_AT") >"$WORK/shop.log" 2>&1 ||
    fail "the app with AgentLedgerPlugin"
say "   $(tail -n 1 "$WORK/shop.log")"
say "passed"
