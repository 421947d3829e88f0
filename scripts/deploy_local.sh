#!/usr/bin/env bash
# Run fedpfn as a real Flower 1.42 deployment on this machine: one SuperLink with TLS and
# SuperNode authentication, N SuperNodes as separate processes, the app through `flwr run`.
# Every role lives in its own folder, as it would on its own machine (see docs/deployment.md):
# WORK/link (the SuperLink host), WORK/operator (whoever runs `flwr`), WORK/node-I (SuperNode
# I), each with its own FLWR_HOME and working folder; nothing of one role is read by another.
#
#   scripts/deploy_local.sh [options]
#
# Options:
#   -n, --nodes N           SuperNodes, one per client/partition (default 2)
#   -r, --rounds R          communication rounds (default 2)
#   -a, --algorithm A       fedpfn, fedpnu, fedavg, fedprox, ... (default fedpfn)
#   -m, --model M           mlp, cnn, ... (default mlp, the quickest)
#       --dataset D         (default fmnist, real data from /usr/share/datasets/fashion-mnist)
#   -o, --out DIR           run folder on the SuperLink host, made absolute
#                           (default runs/deploy-<algorithm>-<time>)
#       --overwrite         replace the files of an earlier run in --out (only the run's own
#                           files: a folder holding anything else is refused)
#       --link-host ADDR    loopback address of the SuperLink, e.g. 127.0.0.2 for a rehearsal
#                           of several hosts; its certificate is issued for it (default 127.0.0.1)
#   -p, --base-port P       SuperLink on ADDR:P (Fleet, Control and Runtime API: one HTTPS
#                           port in Flower 1.42); SuperNode i serves its local Runtime API on
#                           127.0.0.1:P+1+i (default 9100)
#       --node-data MODE    shared: every SuperNode reads the dataset from the run's data root
#                           (default); copy: each SuperNode gets its own copy of the dataset in
#                           WORK/node-I/data and reads only that (node config data-root);
#                           partition: each gets only its own partition, exported into
#                           WORK/node-I/partition (scripts/export_partition.py, node config
#                           partition-dir). With shared and copy, a node caches its partition
#                           in its FLWR_HOME at its first message
#   -c, --run-config 'K=V ...'
#                           more settings (repeatable), e.g. -c 'seed=3 round-timeout=60':
#                           any RunConfig setting (pyproject.toml declares them all)
#       --unauthorized K    also start K SuperNodes whose keys are NOT registered; the SuperLink
#                           must refuse them (the script fails if it lists one online) (default 0)
#   Faults, for rehearsals and tests (see docs/deployment.md, "What a lost or slow node does"):
#       --slow-node I:S[:R] SuperNode I sleeps S s before it trains (node-config test knobs
#                           test-delay-s / test-delay-rounds), in round R only or every round
#       --kill-node I:K     kill -9 SuperNode I once it has received its K-th train message,
#                           then start it again (same key, same partition) as soon as the
#                           SuperLink lists it offline
#   -w, --work-dir DIR      a new or empty folder for all roles, logs and PIDs (default: a new
#                           folder from mktemp; mode 0700; kept so the logs can be read)
#       --app DIR           the Flower app to run (default: this repository)
#       --timeout S         give up on the run after S seconds (default 900)
#   -h, --help
#
# Environment: FLWR_TELEMETRY_ENABLED=0, FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 and
# FLWR_DISABLE_UPDATE_CHECK=1 unless you set them; FLWR_HOME is each role's own.
# FLWR_BIN: folder of flower-superlink, flower-supernode, flower-superexec and flwr
# (default: the repository's .venv/bin, else PATH).
#
# Exit status: 0 run finished and summary.json written; 1 the deployment or the run failed
# (the tail of every log is printed); 2 bad options; 130/143 interrupted. Every process the
# script started is stopped on exit, whatever the reason, by PID.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$script_dir/.." && pwd)"

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
die_usage() { echo "deploy_local.sh: $* (see --help)" >&2; exit 2; }  # one line, naming what is wrong
say() { printf "[deploy %4ss] %s\n" "$SECONDS" "$*"; }
QUIET_S=20  # a run silent this long gets a line that it is alive

# --- options -----------------------------------------------------------------------------
nodes=2
rounds=2
algorithm=fedpfn
model=mlp
dataset=fmnist
out=""
overwrite=0
link_host=127.0.0.1
base_port=9100
node_data=shared
extra_config=()
unauthorized=0
slow_specs=()
kill_spec=""
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
    --link-host) need_value "$@"; link_host="$2"; shift 2 ;;
    -p|--base-port) need_value "$@"; base_port="$2"; shift 2 ;;
    --node-data) need_value "$@"; node_data="$2"; shift 2 ;;
    -c|--run-config) need_value "$@"; extra_config+=("$2"); shift 2 ;;
    --unauthorized) need_value "$@"; unauthorized="$2"; shift 2 ;;
    --slow-node) need_value "$@"; slow_specs+=("$2"); shift 2 ;;
    --kill-node) need_value "$@"; kill_spec="$2"; shift 2 ;;
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
[[ "$link_host" =~ ^127\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] \
  && ((BASH_REMATCH[1] <= 255 && BASH_REMATCH[2] <= 255 && BASH_REMATCH[3] >= 1 && BASH_REMATCH[3] <= 254)) \
  || die_usage "--link-host must be a loopback address 127.x.y.z, got '$link_host'"
[[ "$node_data" == shared || "$node_data" == copy || "$node_data" == partition ]] \
  || die_usage "--node-data must be shared or copy (the dataset) or partition (the node's own), got '$node_data'"
for v in "$algorithm" "$model" "$dataset"; do
  [[ "$v" =~ ^[A-Za-z0-9_+.:-]+$ ]] || die_usage "'$v' is not a valid algorithm/model/dataset name"
done

# Faults: node index, seconds and round of each slow node; node index and message of the kill.
declare -A slow_seconds=() slow_round=()
for spec in "${slow_specs[@]}"; do
  [[ "$spec" =~ ^([0-9]+):([0-9]+(\.[0-9]+)?)(:([0-9]+))?$ ]] \
    || die_usage "--slow-node takes I:SECONDS[:ROUND], got '$spec'"
  ((BASH_REMATCH[1] < nodes)) || die_usage "--slow-node: node ${BASH_REMATCH[1]} does not exist (--nodes $nodes)"
  slow_seconds[${BASH_REMATCH[1]}]="${BASH_REMATCH[2]}"
  slow_round[${BASH_REMATCH[1]}]="${BASH_REMATCH[5]}"
done
kill_node=-1
kill_at=0
if [[ -n "$kill_spec" ]]; then
  [[ "$kill_spec" =~ ^([0-9]+):([0-9]+)$ ]] && ((BASH_REMATCH[2] >= 1)) \
    || die_usage "--kill-node takes I:K (K >= 1), got '$kill_spec'"
  kill_node="${BASH_REMATCH[1]}"
  kill_at="${BASH_REMATCH[2]}"
  ((kill_node < nodes)) || die_usage "--kill-node: node $kill_node does not exist (--nodes $nodes)"
fi

[[ -f "$app/pyproject.toml" ]] || die_usage "--app '$app' holds no pyproject.toml"
app="$(cd "$app" && pwd)"

# The ServerApp runs in a process whose working directory is not ours: make paths absolute.
[[ -n "$out" ]] || out="$repo/runs/deploy-$algorithm-$(date +%Y%m%d-%H%M%S)"
out="$(realpath -m -- "$out")"
[[ "$out" != *'"'* && "$out" != *\\* && "$out" != *"'"* ]] \
  || die_usage "--out may not contain quotes or backslashes: '$out'"
# The run folder's own rule (fedpfn's RunFolder, applied by the ServerApp) decides what
# --overwrite replaces; refused here already, before anything starts, what it would refuse.
if [[ -e "$out" && ! -d "$out" ]]; then
  die_usage "out: '$out' is not a folder"
elif [[ -d "$out" && -n "$(ls -A -- "$out")" ]]; then
  [[ -e "$out/config.json" ]] \
    || die_usage "out: '$out' holds files that are not a run; choose a new or empty folder"
  ((overwrite == 1)) || die_usage "out: '$out' already holds a run; pass --overwrite or choose another --out"
fi
if [[ -n "$work" ]]; then
  work="$(realpath -m -- "$work")"
  [[ ! -e "$work" || (-d "$work" && -z "$(ls -A -- "$work")") ]] \
    || die_usage "--work-dir '$work' exists and is not empty; give a new or empty folder"
  [[ "$work" != *'"'* && "$work" != *\\* && "$work" != *"'"* && "$work" != *" "* ]] \
    || die_usage "--work-dir may not contain quotes, backslashes or spaces: '$work'"
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
((overwrite == 1)) && run_config+=" overwrite=true"
# Prints the validated config as JSON, and on a second line the folder the run's data is in.
checked="$("$python" - "$app" "$run_config" "${extra_config[@]}" <<'PY'
import re, sys, tomllib
app, ours_line, extras = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.path.insert(0, app)
try:
    from fedpfn.core.config import FLAT_FIELDS, ConfigError
    from fedpfn.runtime.algorithms import hparam_fields, load_config
    fields = {*FLAT_FIELDS, *hparam_fields()}  # every setting as typed: the groups' flat ones, the algorithms' own
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
        from fedpfn.core.data import DEBIAN_FMNIST_DIR
        cfg = load_config(values)
        print(cfg.to_json())
        print(cfg.task.data_root or DEBIAN_FMNIST_DIR)
    except ConfigError as err:
        problems += str(err).splitlines()
if problems:
    print("deploy_local.sh: " + "\ndeploy_local.sh: ".join(problems), file=sys.stderr)
    sys.exit(1)
PY
)" || exit 2
data_source="$(sed -n 2p <<<"$checked")"
if [[ "$node_data" == copy ]]; then
  [[ -n "$data_source" ]] || die_usage "--node-data copy needs a fedpfn app (--app)"
  [[ -d "$data_source" ]] || die_usage "--node-data copy: the run's data folder '$data_source' does not exist"
fi
[[ "$node_data" != partition || -f "$app/scripts/export_partition.py" ]] \
  || die_usage "--node-data partition needs an app with scripts/export_partition.py"

# --- work folder: one sub-folder per role, private -------------------------------------------
# Keys, certificates and logs are the deployment's own: the folder is 0700 from the start.
if [[ -z "$work" ]]; then
  work="$(mktemp -d "${TMPDIR:-/tmp}/fedpfn-deploy.XXXXXX")"  # 0700
else
  (umask 077 && mkdir -p -- "$work")
  chmod 700 "$work"
fi
logs="$work/logs"
link_dir="$work/link"
op_dir="$work/operator"
node_dir() { echo "$work/node-$1"; }
rogue_dir() { echo "$work/unregistered-$1"; }
mkdir -p "$logs" "$link_dir/certs" "$link_dir/flwr-home" "$op_dir/keys" "$op_dir/flwr-home"
for ((i = 0; i < nodes; i++)); do mkdir -p "$(node_dir "$i")/flwr-home"; done
for ((j = 0; j < unauthorized; j++)); do mkdir -p "$(rogue_dir "$j")/flwr-home"; done
: >"$work/pids"

export FLWR_TELEMETRY_ENABLED="${FLWR_TELEMETRY_ENABLED:-0}"
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="${FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION:-1}"
export FLWR_DISABLE_UPDATE_CHECK="${FLWR_DISABLE_UPDATE_CHECK:-1}"
unset FLWR_INTERNAL_GRPC_CONTROL_API FLWR_INTERNAL_GRPC_FLEET_API  # no legacy gRPC ports
unset FLWR_HOME  # each role gets its own below

# Every process started here carries this mark in its environment (and passes it on to the
# processes Flower starts: SuperExec, flwr-serverapp, flwr-clientapp), so the clean-up
# finds exactly ours, by PID, even those Flower detaches into their own session.
deploy_id="fedpfn-$$-$(date +%s%N)-$RANDOM"
echo "$deploy_id" >"$work/deploy-id"
pids=()
launch() {  # launch NAME LOG ROLE_DIR CMD...: start CMD in ROLE_DIR with its FLWR_HOME, record its PID
  local name="$1" log="$2" dir="$3"
  shift 3
  (cd "$dir" && FLWR_HOME="$dir/flwr-home" FEDPFN_DEPLOY_ID="$deploy_id" exec "$@") >"$log" 2>&1 </dev/null &
  local pid=$!
  pids+=("$pid")
  echo "$name $pid" >>"$work/pids"
}
operator() {  # operator CMD...: a short command of the operator's, in its folder, marked
  (cd "$op_dir" && FLWR_HOME="$op_dir/flwr-home" FEDPFN_DEPLOY_ID="$deploy_id" "$@")
}

# --- clean-up: always, on success, failure and signals -------------------------------------
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

# --- helpers ---------------------------------------------------------------------------------
port_busy() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }  # port_busy HOST PORT
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
wait_gone() {  # wait_gone SECONDS PID: true once PID has exited
  local i
  for ((i = 0; i < $1 * 4; i++)); do
    alive "$2" || return 0
    sleep 0.25
  done
  return 1
}
json_field() {  # json_field KEY < FLWR_JSON_OUTPUT: print one top-level field of flwr's JSON output
  "$python" -c '
import json, sys
text = sys.stdin.read()
print(json.loads(text[text.index("{"):]).get(sys.argv[1], ""))' "$1" 2>/dev/null
}
superlink_nodes() {  # "NODE_ID STATUS" per registered SuperNode, as the SuperLink reports it
  operator flwr supernode ls fedpfn-local --format json 2>/dev/null | "$python" -c '
import json, sys
text = sys.stdin.read()
for node in json.loads(text[text.index("{"):])["nodes"]:
    print(node["node-id"], node["status"])' 2>/dev/null
}

# --- ports ---------------------------------------------------------------------------------
link_port="$base_port"
port_busy "$link_host" "$link_port" && fail "port $link_port on $link_host is in use; choose another --base-port"
for ((p = base_port + 1; p <= base_port + nodes + unauthorized; p++)); do
  port_busy 127.0.0.1 "$p" && fail "port $p on 127.0.0.1 is in use; choose another --base-port"
done

say "work folder: $work"
say "run folder:  $out"

# --- 0. a snapshot of the app, on the operator's side ------------------------------------------
# `flwr run DIR` walks every file under DIR before it applies .gitignore: with a virtualenv
# inside the repository that alone takes 10-40 s. Copy just the files the FAB will hold
# (Flower's own filters) into the operator's folder, and run that snapshot.
# A -c key the app's [tool.flwr.app.config] does not declare is declared in the copy (the
# SuperLink refuses undeclared keys; the settings were checked against RunConfig above).
# In the background: nothing needs the copy before step 5.
"$python" - "$app" "$op_dir/app" "$work" "$out" "${extra_config[@]}" >"$logs/stage-app.log" 2>&1 <<'PY' &
import os, re, shutil, sys, tomllib
from pathlib import Path
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
skip = {Path(p).resolve() for p in sys.argv[3:5]}
extras = sys.argv[5:]
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
pyproject = dst / "pyproject.toml"
text = pyproject.read_text()
declared = tomllib.loads(text).get("tool", {}).get("flwr", {}).get("app", {}).get("config", {})
pairs = [p for line in extras for p in re.findall(r"(\S+?)=('[^']*'|\"[^\"]*\"|\S+)", line)]
missing = {key: value for key, value in pairs if key not in declared}
if missing and "[tool.flwr.app.config]\n" in text:
    lines = "".join(f"{key} = {value}\n" for key, value in missing.items())
    pyproject.write_text(text.replace("[tool.flwr.app.config]\n", "[tool.flwr.app.config]\n" + lines, 1))
    print("declared in the copy's pyproject.toml:", ", ".join(missing))
PY
stage_pid=$!
pids+=("$stage_pid")

# --- 1. certificates and keys, handed to the roles ------------------------------------------
# The CA lives in WORK/ca only while it signs the SuperLink's certificate; then its key is
# removed. Each private key moves to the one role that uses it.
san="IP:$link_host"
[[ "$link_host" == 127.0.0.1 ]] && san+=",DNS:localhost"
rogue_keys=()
for ((j = 0; j < unauthorized; j++)); do rogue_keys+=(--key "unregistered-$j"); done
PYTHON="$python" "$script_dir/make_certs.sh" --san "$san" --nodes "$nodes" "${rogue_keys[@]}" \
  --discard-ca-key "$work/ca" >"$logs/make_certs.log" 2>&1 \
  || fail "making certificates (see $logs/make_certs.log)"
cp "$work/ca/ca.crt" "$link_dir/certs/"
mv "$work/ca/server.pem" "$work/ca/server.key" "$link_dir/certs/"
cp "$work/ca/ca.crt" "$op_dir/"
for ((i = 0; i < nodes; i++)); do
  cp "$work/ca/ca.crt" "$(node_dir "$i")/"
  mv "$work/ca/node-$i" "$(node_dir "$i")/node-key"
  mv "$work/ca/node-$i.pub" "$op_dir/keys/"  # the public key goes to the operator, who registers it
done
for ((j = 0; j < unauthorized; j++)); do
  cp "$work/ca/ca.crt" "$(rogue_dir "$j")/"
  mv "$work/ca/unregistered-$j" "$(rogue_dir "$j")/node-key"
done
say "1/5 certificates for $san (CA key removed) and $((nodes + unauthorized)) node key pairs, one per role folder"

if [[ "$node_data" == copy ]]; then
  for ((i = 0; i < nodes; i++)); do mkdir -p "$(node_dir "$i")/data" && cp -R "$data_source/." "$(node_dir "$i")/data/"; done
  say "    each SuperNode reads its own copy of $data_source (WORK/node-I/data)"
elif [[ "$node_data" == partition ]]; then  # in the background: nothing needs it before step 4
  sed -n 1p <<<"$checked" >"$op_dir/run-config.json"
  targets=()
  for ((i = 0; i < nodes; i++)); do targets+=(--to "$i=$(node_dir "$i")/partition"); done
  "$python" "$app/scripts/export_partition.py" --config "$op_dir/run-config.json" "${targets[@]}" \
    >"$logs/export-partitions.log" 2>&1 &
  export_pid=$!
  pids+=("$export_pid")
fi

cat >"$op_dir/flwr-home/config.toml" <<EOF
[superlink]
default = "fedpfn-local"

[superlink.fedpfn-local]
address = "$link_host:$link_port"
root-certificates = "$op_dir/ca.crt"
EOF

# --- 2. SuperLink ----------------------------------------------------------------------------
superlink_args=(
  --ssl-ca-certfile "$link_dir/certs/ca.crt" --ssl-certfile "$link_dir/certs/server.pem"
  --ssl-keyfile "$link_dir/certs/server.key" --enable-supernode-auth --host "$link_host" --port "$link_port"
)
[[ "$FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION" == 1 ]] \
  && superlink_args+=(--disable-runtime-dependency-installation)
launch superlink "$logs/superlink.log" "$link_dir" flower-superlink "${superlink_args[@]}"
superlink_pid="${pids[-1]}"
wait_for 90 "$superlink_pid" "SuperLink on $link_host:$link_port" port_busy "$link_host" "$link_port"
say "2/5 SuperLink (TLS, SuperNode authentication) on https://$link_host:$link_port, PID $superlink_pid"

# --- 3. the operator registers the authorised SuperNodes' public keys -------------------------
register_pids=()
for ((i = 0; i < nodes; i++)); do
  launch "register-$i" "$logs/register-$i.log" "$op_dir" \
    flwr supernode register "$op_dir/keys/node-$i.pub" fedpfn-local --name "node-$i" --format json
  register_pids+=("${pids[-1]}")
done
node_ids=()
for ((i = 0; i < nodes; i++)); do
  wait "${register_pids[i]}" || fail "registering node-$i.pub (see $logs/register-$i.log)"
  node_ids+=("$(json_field node-id <"$logs/register-$i.log")")
  is_int "${node_ids[i]}" || fail "registering node-$i.pub gave no node id (see $logs/register-$i.log)"
done
say "3/5 registered $nodes SuperNode public keys"

# --- 4. SuperNodes ---------------------------------------------------------------------------
if [[ "$node_data" == partition ]]; then
  wait "$export_pid" || fail "exporting the partitions (see $logs/export-partitions.log)"
  say "    each SuperNode holds only its own partition (WORK/node-I/partition)"
fi
node_pids=()
start_supernode() {  # start_supernode I LOG: SuperNode I from its own folder, its own files only
  local i="$1" log="$2" dir config
  dir="$(node_dir "$i")"
  config="partition-id=$i num-partitions=$nodes"
  [[ "$node_data" == copy ]] && config+=" data-root=\"$dir/data\""
  [[ "$node_data" == partition ]] && config+=" partition-dir=\"$dir/partition\""
  if [[ -n "${slow_seconds[$i]:-}" ]]; then
    config+=" test-delay-s=${slow_seconds[$i]}"
    [[ -n "${slow_round[$i]}" ]] && config+=" test-delay-rounds=\"${slow_round[$i]}\""
  fi
  local args=(--root-certificates "$dir/ca.crt" --superlink "$link_host:$link_port"
    --auth-supernode-private-key "$dir/node-key" --node-config "$config"
    --host 127.0.0.1 --port "$((base_port + 1 + i))")
  [[ "$FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION" == 0 ]] && args+=(--allow-runtime-dependency-installation)
  launch "supernode-$i" "$log" "$dir" flower-supernode "${args[@]}"
  node_pids[i]="${pids[-1]}"
}
for ((i = 0; i < nodes; i++)); do start_supernode "$i" "$logs/supernode-$i.log"; done
rogue_pids=()
for ((j = 0; j < unauthorized; j++)); do
  # Its key is valid but was never registered; it claims an authorised node's partition.
  dir="$(rogue_dir "$j")"
  launch "unregistered-$j" "$logs/supernode-unregistered-$j.log" "$dir" flower-supernode \
    --root-certificates "$dir/ca.crt" --superlink "$link_host:$link_port" \
    --auth-supernode-private-key "$dir/node-key" \
    --node-config "partition-id=$((j % nodes)) num-partitions=$nodes" \
    --host 127.0.0.1 --port "$((base_port + 1 + nodes + j))"
  rogue_pids+=("${pids[-1]}")
done
connected() { grep -q "SuperNode ID:" "$1"; }  # readiness only; who is in is asked of the SuperLink
for ((i = 0; i < nodes; i++)); do
  wait_for 180 "${node_pids[i]}" "SuperNode $i connecting to the SuperLink" \
    connected "$logs/supernode-$i.log"
done
# Who is in the federation is what the SuperLink says: exactly the registered keys, online.
for ((j = 0; j < unauthorized; j++)); do
  wait_gone 60 "${rogue_pids[j]}" \
    || fail "unregistered SuperNode $j is still running after 60 s (see $logs/supernode-unregistered-$j.log)"
done
online="$(superlink_nodes | awk '$2 == "online" { print $1 }' | sort | xargs)"
expected="$(printf '%s\n' "${node_ids[@]}" | sort | xargs)"
[[ "$online" == "$expected" ]] \
  || fail "the SuperLink lists online SuperNodes [$online], expected exactly the registered [$expected]"
rogue_note=""
((unauthorized > 0)) && rogue_note="; the $unauthorized unregistered SuperNode(s) were refused"
say "4/5 the SuperLink lists exactly the $nodes registered SuperNodes online$rogue_note"

# --- faults: kill -9 one SuperNode mid-round, start it again once the SuperLink lists it offline
kill_state=none
((kill_node >= 0)) && kill_state=armed
killed_at=0
checked_at=0
fault_step() {
  local received status
  case "$kill_state" in
    armed)
      received="$(grep -c "Receiving: train message" "$logs/supernode-$kill_node.log" || true)"
      ((received >= kill_at)) || return 0
      sleep 1  # let its ClientApp start: the node dies mid-round, not between rounds
      kill -KILL "${node_pids[kill_node]}"
      wait "${node_pids[kill_node]}" 2>/dev/null || true  # reaped quietly: bash would report "Killed"
      kill_state=killed
      killed_at=$SECONDS
      say "fault: kill -9 SuperNode $kill_node (PID ${node_pids[kill_node]}) in its train message $kill_at"
      ;;
    killed)
      ((SECONDS - checked_at >= 5)) || return 0
      checked_at=$SECONDS
      status="$(superlink_nodes | awk -v id="${node_ids[kill_node]}" '$1 == id { print $2 }')"
      if [[ "$status" == offline ]]; then
        start_supernode "$kill_node" "$logs/supernode-$kill_node-restarted.log"
        kill_state=restarted
        say "fault: SuperNode $kill_node listed offline after $((SECONDS - killed_at)) s; started again (PID ${node_pids[kill_node]})"
      elif ((SECONDS - killed_at > 180)); then
        fail "the SuperLink still lists the killed SuperNode $kill_node as '$status' after 180 s"
      fi
      ;;
  esac
}

# --- 5. the run, started by the operator -------------------------------------------------------
wait "$stage_pid" || fail "copying the app (see $logs/stage-app.log)"
run_args=(run "$op_dir/app" fedpfn-local)
for extra in "${extra_config[@]}"; do run_args+=(--run-config "$extra"); done
run_args+=(--run-config "$run_config" --stream)
say "5/5 flwr ${run_args[*]}"
t0=$SECONDS
# In the background so that INT/TERM reach the trap at once; the log is shown as it grows
# (unbuffered: Python would hold a file's output back in blocks, a minute of silence), and a
# line says the run is alive when a round keeps it quiet.
: >"$logs/run.log"  # there before tail opens it
launch flwr-run "$logs/run.log" "$op_dir" env PYTHONUNBUFFERED=1 timeout --signal=TERM "$run_timeout" flwr "${run_args[@]}"
run_pid="${pids[-1]}"
tail -n +1 -f --pid="$run_pid" "$logs/run.log" &
tail_pid=$!
pids+=("$tail_pid")
log_size=0
quiet_since=$SECONDS
heartbeat() {  # after QUIET_S s without output: the run is alive, and where the nodes log
  local size
  size="$(stat -c %s "$logs/run.log")"
  if ((size != log_size)); then
    log_size=$size
    quiet_since=$SECONDS
  elif ((SECONDS - quiet_since >= QUIET_S)); then
    say "    still running, no output for $((SECONDS - quiet_since)) s (the SuperNodes train: $logs/supernode-*.log)"
    quiet_since=$SECONDS
  fi
}
while alive "$run_pid"; do  # a SuperNode or the SuperLink that dies unplanned stops the run
  heartbeat
  alive "$superlink_pid" || fail "the SuperLink (PID $superlink_pid) exited during the run"
  for ((i = 0; i < nodes; i++)); do
    [[ "$i" == "$kill_node" && "$kill_state" == killed ]] && continue
    alive "${node_pids[i]}" \
      || fail "SuperNode $i (PID ${node_pids[i]}) exited during the run (see $logs/supernode-$i.log)"
  done
  fault_step
  sleep 1
done
run_rc=0
wait "$run_pid" || run_rc=$?
wait "$tail_pid" 2>/dev/null || true
elapsed=$((SECONDS - t0))
((run_rc == 124)) && fail "the run did not finish within --timeout $run_timeout s"
((run_rc == 0)) || fail "flwr run exited with status $run_rc"
[[ "$kill_state" == killed ]] && fail "the run ended before the killed SuperNode $kill_node could be started again"

run_id="$(grep -oE 'Successfully started run [0-9]+' "$logs/run.log" | grep -oE '[0-9]+$' | head -n 1 || true)"
[[ -n "$run_id" ]] || fail "flwr run did not start a run (see $logs/run.log)"
operator flwr ls fedpfn-local --run-id "$run_id" --format json >"$logs/run-status.log" 2>&1 || true
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

[[ "$status" == "finished:completed" ]] \
  || fail "run $run_id ended with status '${status:-unknown}'${details:+: $details}"
[[ -f "$out/summary.json" ]] || fail "run $run_id finished but $out/summary.json is missing"
say "run $run_id finished:completed in ${elapsed} s; summary:"
cat "$out/summary.json"
say "run folder: $out"
say "logs:       $logs"
