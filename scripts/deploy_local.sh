#!/usr/bin/env bash
# Run fedpfn as a real Flower 1.42 deployment on this machine: one SuperLink with TLS and
# SuperNode authentication, N SuperNodes as separate processes, the app through `flwr run`.
#
#   scripts/deploy_local.sh [options]
#
# Options:
#   -n, --nodes N           SuperNodes, one per client/partition (default 2)
#   -r, --rounds R          communication rounds (default 2)
#   -a, --algorithm A       fedpfn, fedpnu, fedavg, fedprox, ... (default fedpfn)
#   -m, --model M           mlp, cnn, ... (default mlp, the quickest)
#       --dataset D         (default fmnist, real data from /usr/share/datasets/fashion-mnist)
#   -o, --out DIR           run folder, made absolute (default runs/deploy-<algorithm>-<time>)
#       --overwrite         replace a run folder that already holds a run
#   -p, --base-port P       SuperLink on 127.0.0.1:P (Fleet, Control and Runtime API: one
#                           HTTPS port in Flower 1.42); SuperNode i serves its Runtime API on
#                           127.0.0.1:P+1+i (default 9100)
#   -c, --run-config 'K=V ...'
#                           more settings (repeatable), e.g. -c 'seed=3 partition="iid"':
#                           any RunConfig field (pyproject.toml declares them all)
#       --unauthorized K    also start K SuperNodes whose keys are NOT registered; they must
#                           be refused (the script fails if one gets in) (default 0)
#   -w, --work-dir DIR      certificates, keys, FLWR_HOME, PIDs and logs (default: a new
#                           folder from mktemp; kept after the run so the logs can be read)
#       --app DIR           the Flower app to run (default: this repository)
#       --timeout S         give up on the run after S seconds (default 900)
#   -h, --help
#
# Environment: FLWR_TELEMETRY_ENABLED=0, FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 and
# FLWR_DISABLE_UPDATE_CHECK=1 unless you set them; FLWR_HOME is the work folder's.
# FLWR_BIN: folder of flower-superlink, flower-supernode, flower-superexec and flwr
# (default: the repository's .venv/bin, else PATH).
#
# Exit status: 0 run finished and summary.json written; 1 the deployment or the run failed
# (the tail of every log is printed); 2 bad options; 130/143 interrupted. Every process the
# script started is stopped on exit, whatever the reason.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$script_dir/.." && pwd)"

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
die_usage() { echo "deploy_local.sh: $*" >&2; echo "(see --help)" >&2; exit 2; }
say() { echo "[deploy] $*"; }

# --- options -----------------------------------------------------------------------------
nodes=2
rounds=2
algorithm=fedpfn
model=mlp
dataset=fmnist
out=""
overwrite=0
base_port=9100
extra_config=()
unauthorized=0
work=""
app="$repo"
run_timeout=900

need_value() { [[ $# -ge 2 && -n "$2" ]] || die_usage "$1 needs a value"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    -n|--nodes) need_value "$@"; nodes="$2"; shift 2 ;;
    -r|--rounds) need_value "$@"; rounds="$2"; shift 2 ;;
    -a|--algorithm) need_value "$@"; algorithm="$2"; shift 2 ;;
    -m|--model) need_value "$@"; model="$2"; shift 2 ;;
    --dataset) need_value "$@"; dataset="$2"; shift 2 ;;
    -o|--out) need_value "$@"; out="$2"; shift 2 ;;
    --overwrite) overwrite=1; shift ;;
    -p|--base-port) need_value "$@"; base_port="$2"; shift 2 ;;
    -c|--run-config) need_value "$@"; extra_config+=("$2"); shift 2 ;;
    --unauthorized) need_value "$@"; unauthorized="$2"; shift 2 ;;
    -w|--work-dir) need_value "$@"; work="$2"; shift 2 ;;
    --app) need_value "$@"; app="$2"; shift 2 ;;
    --timeout) need_value "$@"; run_timeout="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die_usage "unknown argument '$1'" ;;
  esac
done

is_int() { [[ "$1" =~ ^[0-9]+$ ]]; }
is_int "$nodes" && ((nodes >= 1)) || die_usage "--nodes must be a whole number >= 1, got '$nodes'"
is_int "$rounds" && ((rounds >= 1)) || die_usage "--rounds must be a whole number >= 1, got '$rounds'"
is_int "$unauthorized" || die_usage "--unauthorized must be a whole number, got '$unauthorized'"
is_int "$run_timeout" && ((run_timeout >= 1)) || die_usage "--timeout must be seconds >= 1, got '$run_timeout'"
is_int "$base_port" && ((base_port >= 1024 && base_port + nodes + unauthorized <= 65535)) \
  || die_usage "--base-port must leave room for $((nodes + unauthorized + 1)) ports in 1024..65535, got '$base_port'"
for v in "$algorithm" "$model" "$dataset"; do
  [[ "$v" =~ ^[A-Za-z0-9_+.:-]+$ ]] || die_usage "'$v' is not a valid algorithm/model/dataset name"
done
[[ -f "$app/pyproject.toml" ]] || die_usage "--app '$app' holds no pyproject.toml"
app="$(cd "$app" && pwd)"

# The ServerApp runs in a process whose working directory is not ours: make paths absolute.
[[ -n "$out" ]] || out="$repo/runs/deploy-$algorithm-$(date +%Y%m%d-%H%M%S)"
out="$(realpath -m -- "$out")"
[[ "$out" != *'"'* && "$out" != *\\* && "$out" != *"'"* ]] \
  || die_usage "--out may not contain quotes or backslashes: '$out'"
if [[ -e "$out/config.json" && $overwrite -eq 0 ]]; then
  die_usage "out: '$out' already holds a run; pass --overwrite or choose another --out"
fi

# --- tools -------------------------------------------------------------------------------
command -v openssl >/dev/null || { echo "deploy_local.sh: openssl is not installed" >&2; exit 1; }
if [[ -z "${FLWR_BIN:-}" ]]; then
  if [[ -x "$repo/.venv/bin/flower-superlink" ]]; then
    FLWR_BIN="$repo/.venv/bin"
  else
    FLWR_BIN="$(dirname "$(command -v flower-superlink || echo /nonexistent/x)")"
  fi
fi
for tool in flower-superlink flower-supernode flower-superexec flwr; do
  [[ -x "$FLWR_BIN/$tool" ]] || { echo "deploy_local.sh: $tool not found in '$FLWR_BIN' (set FLWR_BIN)" >&2; exit 1; }
done
python="$FLWR_BIN/python"
[[ -x "$python" ]] || python="$(command -v python3)"
# flower-superlink and flower-supernode start `flower-superexec` by name: it must be on PATH.
export PATH="$FLWR_BIN:$PATH"

# --- run-config: checked before anything starts --------------------------------------------
run_config="num-clients=$nodes clients-per-round=$nodes rounds=$rounds algorithm=\"$algorithm\""
run_config+=" dataset=\"$dataset\" model=\"$model\" out=\"$out\""
"$python" - "$app" "$run_config" "${extra_config[@]}" <<'PY' || exit 2
import dataclasses, re, sys, tomllib
app, ours_line, extras = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.path.insert(0, app)
try:
    from fedpfn.config import ConfigError, RunConfig
    fields = {f.name for f in dataclasses.fields(RunConfig)}
except Exception:  # not fedpfn: leave the keys to the SuperLink
    fields = None
ours = {"num_clients", "clients_per_round", "rounds", "algorithm", "dataset", "model", "out", "overwrite"}
pattern = re.compile(r"(\S+?)=('[^']*'|\"[^\"]*\"|\S+)")  # flwr's own parser
problems = []
for line in extras:
    pairs = pattern.findall(line)
    if not pairs:
        problems.append(f"--run-config '{line}': expected KEY=VALUE pairs")
    for key, value in pairs:
        norm = key.replace("-", "_")
        if norm in ours:
            problems.append(f"--run-config: '{key}' is set by the script; use its own option")
        elif fields is not None and norm not in fields:
            problems.append(
                f"--run-config: unknown setting '{key}'; known: "
                + ", ".join(sorted(f.replace("_", "-") for f in fields - ours))
            )
        else:
            try:
                tomllib.loads(f"x = {value}")
            except tomllib.TOMLDecodeError:
                problems.append(
                    f"--run-config: value of '{key}' is not a TOML value: {value} "
                    "(quote strings: key=\"text\")"
                )
if not problems and fields is not None:  # the whole config, as the ServerApp will see it
    values = {}
    for line in [*extras, ours_line]:
        values.update(tomllib.loads("\n".join(f"{k} = {v}" for k, v in pattern.findall(line))))
    try:
        RunConfig.from_dict(values).validated()
    except ConfigError as err:
        problems += str(err).splitlines()
if problems:
    print("deploy_local.sh: " + "\ndeploy_local.sh: ".join(problems), file=sys.stderr)
    sys.exit(1)
PY

# --- work folder, environment --------------------------------------------------------------
if [[ -z "$work" ]]; then
  work="$(mktemp -d "${TMPDIR:-/tmp}/fedpfn-deploy.XXXXXX")"
else
  mkdir -p "$work"
  work="$(cd "$work" && pwd)"
fi
logs="$work/logs"
certs="$work/certs"
mkdir -p "$logs" "$certs"
: >"$work/pids"

export FLWR_TELEMETRY_ENABLED="${FLWR_TELEMETRY_ENABLED:-0}"
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="${FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION:-1}"
export FLWR_DISABLE_UPDATE_CHECK="${FLWR_DISABLE_UPDATE_CHECK:-1}"
unset FLWR_INTERNAL_GRPC_CONTROL_API FLWR_INTERNAL_GRPC_FLEET_API  # no legacy gRPC ports
export FLWR_HOME="$work/flwr-home"
mkdir -p "$FLWR_HOME"

# Every process started here carries this mark in its environment (and passes it on to the
# processes Flower starts: SuperExec, flwr-serverapp, flwr-clientapp), so the clean-up
# finds exactly ours, by PID, even those Flower detaches into their own session.
deploy_id="fedpfn-$$-$(date +%s%N)-$RANDOM"
echo "$deploy_id" >"$work/deploy-id"
launch() {  # launch NAME LOG CMD...: start CMD in the background, record its PID
  local name="$1" log="$2"
  shift 2
  FEDPFN_DEPLOY_ID="$deploy_id" "$@" >"$log" 2>&1 </dev/null &
  local pid=$!
  pids+=("$pid")
  echo "$name $pid" >>"$work/pids"
}
tagged() { FEDPFN_DEPLOY_ID="$deploy_id" "$@"; }  # a short foreground command, marked too

# --- clean-up: always, on success, failure and signals -------------------------------------
pids=()
alive() { kill -0 "$1" 2>/dev/null; }
marked_pids() {  # PIDs of live processes whose environment holds our mark
  local f pid
  for f in /proc/[0-9]*/environ; do
    pid="${f#/proc/}"
    pid="${pid%/environ}"
    [[ "$pid" == "$$" || "$pid" == "${BASHPID:-}" ]] && continue
    grep -qzx "FEDPFN_DEPLOY_ID=$deploy_id" "$f" 2>/dev/null && echo "$pid"
  done
  return 0
}
stop_all() {
  local pid left i
  for pid in "${pids[@]}"; do alive "$pid" && kill -TERM "$pid" 2>/dev/null; done
  for ((i = 0; i < 100; i++)); do  # up to 10 s to shut down gracefully
    left=0
    for pid in "${pids[@]}"; do alive "$pid" && left=1; done
    ((left == 0)) && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do alive "$pid" && kill -KILL "$pid" 2>/dev/null; done
  # Flower's own children (SuperExec, ServerApp, ClientApp): by our mark, by PID.
  for ((i = 0; i < 50; i++)); do
    left="$(marked_pids)"
    [[ -z "$left" ]] && break
    # shellcheck disable=SC2086
    if ((i < 30)); then kill -TERM $left 2>/dev/null; else kill -KILL $left 2>/dev/null; fi
    sleep 0.2
  done
  wait 2>/dev/null || true
}
show_logs() {
  local f
  for f in "$logs"/*.log; do
    [[ -s "$f" ]] || continue
    echo "----- last lines of $f -----" >&2
    tail -n 25 "$f" >&2
  done
}
failure=""
fail() { failure="$*"; exit 1; }
on_exit() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  stop_all
  if ((rc != 0)); then
    show_logs
    echo >&2
    echo "deploy_local.sh: FAILED${failure:+: $failure}" >&2
    echo "deploy_local.sh: logs, certificates and PIDs are in $work" >&2
  fi
  exit "$rc"
}
trap on_exit EXIT
trap 'failure="interrupted (SIGINT)"; exit 130' INT
trap 'failure="terminated (SIGTERM)"; exit 143' TERM

# --- helpers ------------------------------------------------------------------------------
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_for() {  # wait_for SECONDS PID DESCRIPTION TEST...: poll TEST until true
  local seconds="$1" pid="$2" what="$3" i
  shift 3
  for ((i = 0; i < seconds * 4; i++)); do
    "$@" && return 0
    alive "$pid" || fail "$what: the process (PID $pid) exited"
    sleep 0.25
  done
  fail "$what: not ready after $seconds s"
}

# --- ports ---------------------------------------------------------------------------------
link_port="$base_port"
for ((p = base_port; p <= base_port + nodes + unauthorized; p++)); do
  port_busy "$p" && fail "port $p on 127.0.0.1 is in use; choose another --base-port"
done

if [[ -e "$out/config.json" ]]; then  # --overwrite, checked above
  rm -rf -- "$out"
fi

say "work folder: $work"
say "run folder:  $out"

# --- 0. a snapshot of the app ---------------------------------------------------------------
# `flwr run DIR` walks every file under DIR before it applies .gitignore: with a virtualenv
# inside the repository that alone takes 10-40 s. Copy just the files the FAB will hold
# (Flower's own filters) into the work folder, and run that snapshot.
# (pyproject.toml declares every RunConfig setting in [tool.flwr.app.config], which is what
# lets the SuperLink accept any of them in --run-config.)
"$python" - "$app" "$work/app" "$work" "$out" >"$logs/stage-app.log" 2>&1 <<'PY' \
  || fail "copying the app (see $logs/stage-app.log)"
import os, shutil, sys, tomllib
from pathlib import Path
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
skip = {Path(p).resolve() for p in sys.argv[3:5]}
files = {}
for dirpath, dirnames, filenames in os.walk(src):
    here = Path(dirpath)
    dirnames[:] = [
        d for d in dirnames
        if d not in (".git", "__pycache__", "node_modules")
        and not (here / d).is_symlink()
        and not (here / d / "pyvenv.cfg").exists()  # a virtualenv
        and (here / d).resolve() not in skip
    ]
    for name in filenames:
        path = here / name
        if not path.is_symlink():
            files[path.relative_to(src).as_posix()] = path
try:
    from flwr.cli.build import get_filtered_fab_paths
    from flwr.cli.utils import filter_paths_for_publish
    config = tomllib.loads((src / "pyproject.toml").read_text())
    keep = get_filtered_fab_paths(filter_paths_for_publish(files), config)
except Exception:  # another Flower version: copy the pruned tree, flwr filters it
    keep = list(files)
shutil.rmtree(dst, ignore_errors=True)
for rel in sorted({*keep, "pyproject.toml", ".gitignore"} & set(files)):
    (dst / rel).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(files[rel], dst / rel)
print(f"copied {len(keep)} files of {src} to {dst}")
PY

# --- 1. certificates and SuperNode keys ----------------------------------------------------
rogue_keys=()
for ((j = 0; j < unauthorized; j++)); do rogue_keys+=(--key "unregistered-$j"); done
PYTHON="$python" "$script_dir/make_certs.sh" --nodes "$nodes" "${rogue_keys[@]}" "$certs" \
  >"$logs/make_certs.log" 2>&1 || fail "making certificates (see $logs/make_certs.log)"
say "1/5 certificates (CA, server cert for 127.0.0.1/localhost) and $((nodes + unauthorized)) node key pairs in $certs"

cat >"$FLWR_HOME/config.toml" <<EOF
[superlink]
default = "fedpfn-local"

[superlink.fedpfn-local]
address = "127.0.0.1:$link_port"
root-certificates = "$certs/ca.crt"
EOF

# --- 2. SuperLink ----------------------------------------------------------------------------
superlink_args=(
  --ssl-ca-certfile "$certs/ca.crt" --ssl-certfile "$certs/server.pem" --ssl-keyfile "$certs/server.key"
  --enable-supernode-auth --host 127.0.0.1 --port "$link_port"
)
[[ "$FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION" == 1 ]] \
  && superlink_args+=(--disable-runtime-dependency-installation)
launch superlink "$logs/superlink.log" flower-superlink "${superlink_args[@]}"
superlink_pid="${pids[-1]}"
wait_for 90 "$superlink_pid" "SuperLink on 127.0.0.1:$link_port" port_busy "$link_port"
say "2/5 SuperLink (TLS, SuperNode authentication) on https://127.0.0.1:$link_port, PID $superlink_pid"

# --- 3. register the authorised SuperNodes' public keys --------------------------------------
# `flwr supernode register KEY.pub CONNECTION` (Control API, over TLS); all at once.
register_pids=()
for ((i = 0; i < nodes; i++)); do
  launch "register-$i" "$logs/register-$i.log" \
    flwr supernode register "$certs/node-$i.pub" fedpfn-local --name "node-$i" --format json
  register_pids+=("${pids[-1]}")
done
for ((i = 0; i < nodes; i++)); do
  wait "${register_pids[i]}" && grep -q '"success": true' "$logs/register-$i.log" \
    || fail "registering $certs/node-$i.pub (see $logs/register-$i.log)"
done
say "3/5 registered $nodes SuperNode public keys"

# --- 4. SuperNodes ---------------------------------------------------------------------------
supernode_args=(--root-certificates "$certs/ca.crt" --superlink "127.0.0.1:$link_port")
[[ "$FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION" == 0 ]] \
  && supernode_args+=(--allow-runtime-dependency-installation)
node_pids=()
for ((i = 0; i < nodes; i++)); do
  launch "supernode-$i" "$logs/supernode-$i.log" flower-supernode "${supernode_args[@]}" \
    --auth-supernode-private-key "$certs/node-$i" \
    --node-config "partition-id=$i num-partitions=$nodes" \
    --host 127.0.0.1 --port "$((base_port + 1 + i))"
  node_pids+=("${pids[-1]}")
done
for ((j = 0; j < unauthorized; j++)); do
  # Its key is valid but was never registered; it claims an authorised node's partition.
  launch "unregistered-$j" "$logs/supernode-unregistered-$j.log" flower-supernode "${supernode_args[@]}" \
    --auth-supernode-private-key "$certs/unregistered-$j" \
    --node-config "partition-id=$((j % nodes)) num-partitions=$nodes" \
    --host 127.0.0.1 --port "$((base_port + 1 + nodes + j))"
done
connected() { grep -q "SuperNode ID:" "$1"; }
for ((i = 0; i < nodes; i++)); do
  wait_for 180 "${node_pids[i]}" "SuperNode $i connecting to the SuperLink" \
    connected "$logs/supernode-$i.log"
done
rogue_note=""
((unauthorized > 0)) && rogue_note=", and $unauthorized SuperNode(s) with unregistered keys started"
say "4/5 $nodes SuperNodes connected (Runtime API ports $((base_port + 1))..$((base_port + nodes)))$rogue_note"

# --- 5. the run --------------------------------------------------------------------------------
run_args=(run "$work/app" fedpfn-local)
for extra in "${extra_config[@]}"; do run_args+=(--run-config "$extra"); done
run_args+=(--run-config "$run_config" --stream)
say "5/5 flwr ${run_args[*]}"
t0=$SECONDS
# In the background so that INT/TERM reach the trap at once; the log is shown as it grows.
FEDPFN_DEPLOY_ID="$deploy_id" timeout --signal=TERM "$run_timeout" \
  flwr "${run_args[@]}" >"$logs/run.log" 2>&1 </dev/null &
run_pid=$!
pids+=("$run_pid")
echo "flwr-run $run_pid" >>"$work/pids"
tail -n +1 -f --pid="$run_pid" "$logs/run.log" &
tail_pid=$!
pids+=("$tail_pid")
while alive "$run_pid"; do  # a SuperNode or the SuperLink that dies would stall the run
  alive "$superlink_pid" || fail "the SuperLink (PID $superlink_pid) exited during the run"
  for ((i = 0; i < nodes; i++)); do
    alive "${node_pids[i]}" \
      || fail "SuperNode $i (PID ${node_pids[i]}) exited during the run (see $logs/supernode-$i.log)"
  done
  sleep 1
done
run_rc=0
wait "$run_pid" || run_rc=$?
wait "$tail_pid" 2>/dev/null || true
elapsed=$((SECONDS - t0))
((run_rc == 124)) && fail "the run did not finish within --timeout $run_timeout s"
((run_rc == 0)) || fail "flwr run exited with status $run_rc"

run_id="$(grep -oE 'Successfully started run [0-9]+' "$logs/run.log" | grep -oE '[0-9]+$' | head -n 1 || true)"
[[ -n "$run_id" ]] || fail "flwr run did not start a run (see $logs/run.log)"
tagged flwr ls fedpfn-local --run-id "$run_id" --format json >"$logs/run-status.log" 2>&1 || true
"$python" - "$logs/run-status.log" >"$work/run-status" 2>/dev/null <<'PY' || true
import json, sys
text = open(sys.argv[1], errors="replace").read()
try:
    run = json.loads(text[text.index("{"):])["runs"][0]
    print(run.get("status", "")); print(" ".join(str(run.get("status-details", "")).split()))
except (ValueError, KeyError, IndexError):
    print(""); print("")
PY
status="$(sed -n 1p "$work/run-status")"
details="$(sed -n 2p "$work/run-status")"
[[ "$details" == "N/A" ]] && details=""
echo "$run_id" >"$work/run-id"

for ((j = 0; j < unauthorized; j++)); do
  log="$logs/supernode-unregistered-$j.log"
  connected "$log" && fail "unregistered SuperNode $j was let in (see $log)"
  if grep -q "Failed to activate SuperNode" "$log"; then
    say "unregistered SuperNode $j was refused by the SuperLink, as it should be"
  else
    say "unregistered SuperNode $j never connected (see $log)"
  fi
done

[[ "$status" == "finished:completed" ]] \
  || fail "run $run_id ended with status '${status:-unknown}'${details:+: $details}"
[[ -f "$out/summary.json" ]] || fail "run $run_id finished but $out/summary.json is missing"
say "run $run_id finished:completed in ${elapsed} s; summary:"
cat "$out/summary.json"
say "run folder: $out"
say "logs:       $logs"
