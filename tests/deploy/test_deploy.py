"""A real Flower deployment on this machine: `scripts/deploy_local.sh`.

The `deploy` tests start one SuperLink (TLS, SuperNode authentication) and SuperNodes as
separate processes, run fedpfn through `flwr run`, and check the run folder and what the
SuperLink reports. One test rehearses a federation of several hosts on loopback addresses
and breaks it on purpose (a node killed mid-round and restarted, a slow node, a node with an
unregistered key); another stops the script half-way. Both check that no process the
script started is left behind. Deselect them with `-m "not deploy"`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from fedpfn.runtime import nodedata
from fedpfn.runtime.algorithms import parse_config
from fedpfn.runtime.runfolder import RunFolder

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "scripts" / "deploy_local.sh"
MAKE_CERTS = REPO / "scripts" / "make_certs.sh"
SCRIPT_TIMEOUT = 900  # seconds; the rehearsal takes ~2-3 min on 2 cores, more when they are busy
LINK_HOST = "127.0.0.2"  # the rehearsal's SuperLink "host": a loopback address of its own

needs_openssl = pytest.mark.skipif(
    shutil.which("openssl") is None,
    reason="openssl is not installed: the deployment scripts need it to make TLS certificates",
)


# --- helpers ---------------------------------------------------------------------------------


def free_port_block(size: int) -> int:
    """A base port P free on 127.0.0.1 and LINK_HOST, and P+1 .. P+size-1 free on 127.0.0.1."""
    rng = random.Random(os.getpid() ^ time.time_ns())
    for _ in range(200):
        base = rng.randrange(20000, 60000 - size)
        sockets = []
        try:
            for host, port in [(LINK_HOST, base), *(("127.0.0.1", p) for p in range(base, base + size))]:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(s)
                s.bind((host, port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError("no block of free ports found")


def script_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return env


def deploy_command(tmp_path: Path, *args: str, nodes: int, unauthorized: int = 0) -> list[str]:
    base = free_port_block(nodes + unauthorized + 1)
    return [
        "bash", str(DEPLOY),
        "--nodes", str(nodes),
        "--unauthorized", str(unauthorized),
        "--work-dir", str(tmp_path / "work"),
        "--out", str(tmp_path / "run"),
        "--base-port", str(base),
        "--timeout", str(SCRIPT_TIMEOUT - 120),
        *args,
    ]  # fmt: skip


def marked_processes(deploy_id: str) -> list[int]:
    """Live processes whose environment carries the script's mark (what it started)."""
    found = []
    needle = f"FEDPFN_DEPLOY_ID={deploy_id}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@dataclass(frozen=True)
class Seen:
    """One process as sampled: its arguments, working folder and FLWR_HOME."""

    argv: list[str]
    cwd: str
    home: str

    def runs(self, program: str) -> bool:
        """`program` is argv[0] or, after an interpreter, argv[1]."""
        return any(Path(arg).name == program for arg in self.argv[:2])

    def paths(self) -> list[Path]:
        """Every absolute path it was given: arguments (also inside K="V"), FLWR_HOME, cwd."""
        words = " ".join(self.argv[1:]).replace('"', " ").replace("=", " ").split()
        return [Path(w) for w in [self.cwd, self.home, *words] if w.startswith("/")]


class ProcessWatch(threading.Thread):
    """Samples, every second, where each process the script started works and what it reads."""

    def __init__(self, work: Path) -> None:
        super().__init__(daemon=True)
        self.work = work
        self.seen: dict[int, Seen] = {}
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(1.0):
            id_file = self.work / "deploy-id"
            if not id_file.exists():
                continue
            for pid in marked_processes(id_file.read_text().strip()):
                try:
                    self.seen[pid] = self.describe(Path(f"/proc/{pid}"))
                except OSError:
                    continue

    @staticmethod
    def describe(proc: Path) -> Seen:
        argv = proc.joinpath("cmdline").read_bytes().decode().split("\0")
        env = [item.split("=", 1) for item in proc.joinpath("environ").read_bytes().decode().split("\0")]
        home = next((pair[1] for pair in env if pair[0] == "FLWR_HOME" and len(pair) == 2), "")
        return Seen(argv, os.readlink(proc / "cwd"), home)

    def of(self, program: str) -> list[Seen]:
        return [process for process in self.seen.values() if process.runs(program)]


def running(pid: int) -> bool:
    """True for a live, non-zombie process."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def assert_nothing_left(work: Path) -> None:
    deploy_id = (work / "deploy-id").read_text().strip()
    recorded = [line.split() for line in (work / "pids").read_text().splitlines() if line.strip()]
    assert recorded, "the script recorded no PIDs"
    deadline = time.monotonic() + 15  # Flower's SuperExec watches its parent for a moment
    while time.monotonic() < deadline:
        left = marked_processes(deploy_id)
        if not left:
            break
        time.sleep(0.5)
    assert not left, f"processes started by the script are still running: {left}"
    for name, pid in recorded:
        # a recorded PID that is alive again must belong to someone else (PID reuse)
        assert not running(int(pid)) or int(pid) not in marked_processes(deploy_id), name


def read_log(work: Path, name: str) -> str:
    return (work / "logs" / name).read_text(errors="replace")


def explain(result: subprocess.CompletedProcess) -> str:
    return f"exit status {result.returncode}\n{result.stdout[-8000:]}"


# --- fast checks, no processes --------------------------------------------------------------


@needs_openssl
def test_make_certs_writes_what_flower_loads(tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import (
        load_ssh_private_key,
        load_ssh_public_key,
    )

    out = tmp_path / "certs"
    subprocess.run(
        ["bash", str(MAKE_CERTS), "--nodes", "2", "--key", "spare", "--san", f"IP:{LINK_HOST}", str(out)],
        check=True, env=script_env(), capture_output=True,
    )  # fmt: skip
    ca = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
    server = x509.load_pem_x509_certificate((out / "server.pem").read_bytes())
    assert server.issuer == ca.subject
    san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == [LINK_HOST]
    subprocess.run(
        ["openssl", "verify", "-CAfile", str(out / "ca.crt"), str(out / "server.pem")],
        check=True, capture_output=True,
    )  # fmt: skip
    for name in ("node-0", "node-1", "spare"):
        # as flower-supernode --auth-supernode-private-key and flwr supernode register read them
        private = load_ssh_private_key((out / name).read_bytes(), None)
        public = load_ssh_public_key((out / f"{name}.pub").read_bytes())
        assert isinstance(private, ec.EllipticCurvePrivateKey)
        assert isinstance(public, ec.EllipticCurvePublicKey) and public.curve.name == "secp384r1"
        assert private.public_key() == public
        assert (out / name).stat().st_mode & 0o077 == 0, "a private key must not be readable by others"
    # a second call keeps what exists
    before = (out / "node-0").read_bytes()
    subprocess.run(["bash", str(MAKE_CERTS), "--nodes", "1", str(out)], check=True, capture_output=True)
    assert (out / "node-0").read_bytes() == before


@needs_openssl
def test_make_certs_discards_the_ca_key_and_never_signs_without_it(tmp_path: Path) -> None:
    out = tmp_path / "certs"

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(MAKE_CERTS), *args, str(out)], capture_output=True, text=True)

    assert run("--nodes", "1", "--discard-ca-key").returncode == 0
    assert not (out / "ca.key").exists() and not (out / "ca.srl").exists()
    verify = ["openssl", "verify", "-CAfile", str(out / "ca.crt"), str(out / "server.pem")]
    assert subprocess.run(verify, capture_output=True).returncode == 0
    ca_before = (out / "ca.crt").read_bytes()
    assert run("--nodes", "2").returncode == 0, "node keys need no CA key"
    assert (out / "node-1").exists() and (out / "ca.crt").read_bytes() == ca_before
    (out / "server.pem").unlink()
    refused = run("--nodes", "2")
    assert refused.returncode == 2 and "ca.key was removed" in refused.stderr
    assert (out / "ca.crt").read_bytes() == ca_before, "the CA must not be replaced behind the nodes' back"


def run_refused(*args: str) -> subprocess.CompletedProcess:
    cmd = ["bash", str(DEPLOY), *args]
    return subprocess.run(cmd, check=False, env=script_env(), capture_output=True, text=True, timeout=120)


def test_deploy_refuses_unknown_settings_before_starting_anything(tmp_path: Path) -> None:
    work, run = str(tmp_path / "work"), str(tmp_path / "run")
    result = run_refused("--work-dir", work, "--out", run, "-c", "no-such-setting=1")
    assert result.returncode == 2, result.stderr
    assert "unknown setting 'no-such-setting'" in result.stderr
    assert not (tmp_path / "work").exists()
    result = run_refused("--out", str(tmp_path / "run"), "-c", "rounds=5")
    assert result.returncode == 2 and "set by the script" in result.stderr


def test_deploy_overwrite_never_touches_what_is_not_a_run(tmp_path: Path) -> None:
    out, work = tmp_path / "experiments", tmp_path / "work"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    result = run_refused("--out", str(out), "--overwrite", "--work-dir", str(work))
    assert result.returncode == 2 and "holds files that are not a run" in result.stderr
    assert (out / "notes.txt").read_text() == "mine" and not work.exists()
    (out / "notes.txt").unlink()
    (out / "config.json").write_text("{}")
    result = run_refused("--out", str(out), "--work-dir", str(work))
    assert result.returncode == 2 and "pass --overwrite" in result.stderr
    work.mkdir()
    (work / "other").write_text("x")
    result = run_refused("--out", str(tmp_path / "new"), "--work-dir", str(work))
    assert result.returncode == 2 and "is not empty" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["experiments", "work"]


def test_deploy_refuses_bad_fault_and_host_options() -> None:
    for args, message in [
        (["--link-host", "10.0.0.1"], "loopback address"),
        (["--slow-node", "3:5"], "node 3 does not exist"),
        (["--slow-node", "0:soon"], "I:SECONDS[:ROUND]"),
        (["--kill-node", "1:0"], "I:K (K >= 1)"),
        (["--node-data", "nfs"], "shared or copy"),
    ]:
        result = run_refused(*args)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)


# --- real deployments ---------------------------------------------------------------------------

# s: a normal message takes 25-35 s here at a load average of 3-6 on 2 cores, 45-60 s at 12-15;
# round 1 lasts this long (the slow node), so it is also most of the test's time
ROUND_TIMEOUT = 100


@pytest.mark.deploy
@pytest.mark.alone  # 177 s idle: round 1 lasts the round timeout, and a busy second worker could make a healthy node miss it
@needs_openssl
def test_rehearsal_of_several_hosts_survives_lost_slow_and_rogue_nodes(tmp_path: Path) -> None:
    """Three "hosts" on loopback addresses, each with its own folder, keys and data.

    SCAFFOLD, each node holding only its exported partition and keeping its c_i on its own disk.
    Round 1: SuperNode 1 is killed -9 while it trains and SuperNode 2 sleeps past the round
    timeout; the round closes at the timeout with partition 0 alone (min-replies 1). Node 1
    is started again (same key) once the SuperLink lists it offline (within ~60 s, so before
    round 2) and trains in round 2; node 2's late reply of round 1 is dropped and it trains
    in round 2. A fourth node whose key was never registered is refused.
    """
    work, run = tmp_path / "work", tmp_path / "run"
    cmd = deploy_command(
        tmp_path, "--rounds", "2", "--link-host", LINK_HOST, "--node-data", "partition",
        "--algorithm", "scaffold", "--slow-node", f"2:{ROUND_TIMEOUT}:1", "--kill-node", "1:1",
        "-c", f"round-timeout={ROUND_TIMEOUT} min-replies=1 local-test-fraction=0.2", nodes=3, unauthorized=1,
    )  # fmt: skip
    watch = ProcessWatch(work)
    watch.start()
    started = time.monotonic()
    try:
        proc = subprocess.run(
            cmd, cwd=tmp_path, env=script_env(), capture_output=True, text=True, timeout=SCRIPT_TIMEOUT
        )
    finally:
        watch.halt.set()
        watch.join()
    seconds = time.monotonic() - started
    result = subprocess.CompletedProcess(cmd, proc.returncode, proc.stdout + proc.stderr, "")
    assert result.returncode == 0, explain(result)

    # what the run recorded: who failed when, and that everyone came back
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2]
    first, story = rows[0], f"{rows}\n{explain(result)}"
    assert sorted(first["failed_partitions"]) == [1, 2] and first["num_failures"] == 2, story
    assert first["num_clients"] == 1 and not first["skipped"], story
    assert first["seconds"] >= ROUND_TIMEOUT
    second = rows[1]  # everyone back: the restarted node, and the slow one once its sleep ended
    assert second["failed_partitions"] == second["missing_partitions"] == [], story
    assert second["num_clients"] == 3 and second["num_failures"] == 0, story
    summary = json.loads((run / "summary.json").read_text())
    assert summary["num_failures_total"] == sum(r["num_failures"] for r in rows) >= 2
    assert "kill -9 SuperNode 1" in result.stdout and "started again" in result.stdout
    assert "Receiving: train message" in read_log(work, "supernode-1-restarted.log")

    # the federation as the SuperLink saw it: TLS on its own address, no rogue node
    assert f"Uvicorn running on https://{LINK_HOST}:" in read_log(work, "superlink.log")
    assert "the 1 unregistered SuperNode(s) were refused" in result.stdout
    assert "SuperNode ID:" not in read_log(work, "supernode-unregistered-0.log")

    # several hosts: each role works in its own folder, on its own files only
    roles = {"flower-superlink": work / "link", "flwr": work / "operator"}
    for program, home in roles.items():
        for process in watch.of(program):
            outside = [p for p in process.paths() if p.is_relative_to(work) and not p.is_relative_to(home)]
            assert not outside, (program, outside)
    supernodes = watch.of("flower-supernode")
    assert len(supernodes) >= 4, "three SuperNodes, one restart and the rogue were expected"
    for process in supernodes:
        homes = {p.relative_to(work).parts[0] for p in process.paths() if p.is_relative_to(work)}
        assert len(homes) == 1 and homes < {"node-0", "node-1", "node-2", "unregistered-0"}, process
    for i in range(3):  # only its own partition, exported for it (node config partition-dir)
        exported = work / f"node-{i}" / "partition"
        assert sorted(p.name for p in exported.iterdir()) == sorted([nodedata.META, nodedata.X, nodedata.Y])
        assert json.loads((exported / nodedata.META).read_text())["settings"]["partition_id"] == i
        assert not (work / f"node-{i}" / "data").exists()
    # SCAFFOLD's c_i lives on the nodes (their FLWR_HOME), never in the run folder on the SuperLink's host
    assert not (run / "client_state").exists(), "client state belongs on the nodes"
    cfg = parse_config(RunFolder(run).read_config())
    # node 1 was killed in round 1; node 2's round-1 reply came late and was dropped, and with
    # it the c_i node 2 made then (SCAFFOLD's c holds none of it)
    for i, rounds in ((0, {"r1.npz", "r2.npz"}), (1, {"r2.npz"}), (2, {"r2.npz"})):
        home = work / f"node-{i}" / "flwr-home" / "fedpfn" / "client-state"
        state = nodedata.state_root(cfg, {nodedata.STATE_DIR: str(home)})
        assert {p.name for p in state.rglob("*.npz")} == rounds, list(home.rglob("*"))
        assert {p.relative_to(state).parts[0] for p in state.rglob("*.npz")} == {str(i)}
    clients = [json.loads(line) for line in (run / "clients.jsonl").read_text().splitlines()]
    assert clients and all(c["local_accuracy_after"] is not None for c in clients)
    assert (work.stat().st_mode & 0o777) == 0o700
    assert not list(work.rglob("ca.key")), "the CA key must not outlive the certificates"
    keys = sorted(p.relative_to(work).as_posix() for p in work.rglob("node-key"))
    assert keys == ["node-0/node-key", "node-1/node-key", "node-2/node-key", "unregistered-0/node-key"]
    assert_nothing_left(work)
    print(f"rehearsal, 3 SuperNodes + 1 rogue on {LINK_HOST}, 2 rounds with faults: {seconds:.0f} s")


@pytest.mark.deploy
@needs_openssl
def test_interrupted_deployment_stops_everything_it_started(tmp_path: Path) -> None:
    cmd = deploy_command(tmp_path, "--rounds", "50", nodes=1)
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=script_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # wait until the SuperNodes are up and the run is starting
            lines.append(line)
            if "5/5 flwr run" in line:
                break
        else:
            pytest.fail("the script ended before the run started:\n" + "".join(lines))
        time.sleep(3)
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, "".join(lines) + rest
    assert "terminated (SIGTERM)" in rest
    assert_nothing_left(tmp_path / "work")
