"""A real Flower deployment on this machine: `scripts/deploy_local.sh`.

The `deploy` tests start one SuperLink (TLS, SuperNode authentication) and SuperNodes as
separate processes on 127.0.0.1, run fedpfn through `flwr run`, and check the run folder,
that an unregistered SuperNode is refused, and that no process the script started is
left behind, also when the script is stopped half-way. Deselect them with `-m "not deploy"`.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "scripts" / "deploy_local.sh"
MAKE_CERTS = REPO / "scripts" / "make_certs.sh"
SCRIPT_TIMEOUT = 900  # seconds; a run takes ~1-3 min on 2 cores, more when they are busy

needs_openssl = pytest.mark.skipif(
    shutil.which("openssl") is None,
    reason="openssl is not installed: the deployment scripts need it to make TLS certificates",
)


# --- helpers ---------------------------------------------------------------------------------


def free_port_block(size: int) -> int:
    """A base port P such that P .. P+size-1 are all free on 127.0.0.1."""
    rng = random.Random(os.getpid() ^ time.time_ns())
    for _ in range(200):
        base = rng.randrange(20000, 60000 - size)
        sockets = []
        try:
            for port in range(base, base + size):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(s)
                s.bind(("127.0.0.1", port))
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


def run_deploy(tmp_path: Path, *args: str, nodes: int, unauthorized: int = 0) -> subprocess.CompletedProcess:
    base = free_port_block(nodes + unauthorized + 1)
    cmd = [
        "bash", str(DEPLOY),
        "--nodes", str(nodes),
        "--unauthorized", str(unauthorized),
        "--work-dir", str(tmp_path / "work"),
        "--out", str(tmp_path / "run"),
        "--base-port", str(base),
        "--timeout", str(SCRIPT_TIMEOUT - 120),
        *args,
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=script_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        out, _ = proc.communicate(timeout=SCRIPT_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # its trap stops what it started
        out, _ = proc.communicate(timeout=60)
        pytest.fail(f"deploy_local.sh took more than {SCRIPT_TIMEOUT} s:\n{out[-6000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "")


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
        ["bash", str(MAKE_CERTS), "--nodes", "2", "--key", "spare", str(out)],
        check=True, env=script_env(), capture_output=True,
    )  # fmt: skip
    ca = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
    server = x509.load_pem_x509_certificate((out / "server.pem").read_bytes())
    assert server.issuer == ca.subject
    san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
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


def test_deploy_refuses_unknown_settings_before_starting_anything(tmp_path: Path) -> None:
    result = subprocess.run(
        ["bash", str(DEPLOY), "--work-dir", str(tmp_path / "work"), "--out", str(tmp_path / "run"),
         "-c", "no-such-setting=1"],
        check=False, env=script_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "unknown setting 'no-such-setting'" in result.stderr
    assert not (tmp_path / "work").exists()
    result = subprocess.run(
        ["bash", str(DEPLOY), "--out", str(tmp_path / "run"), "-c", "rounds=5"],
        check=False, env=script_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2 and "set by the script" in result.stderr


# --- real deployments ---------------------------------------------------------------------------


@pytest.mark.deploy
@needs_openssl
def test_two_supernodes_fedpfn_over_tls_with_node_auth(tmp_path: Path) -> None:
    started = time.monotonic()
    result = run_deploy(tmp_path, "--rounds", "2", "--algorithm", "fedpfn", nodes=2)
    seconds = time.monotonic() - started
    work, run = tmp_path / "work", tmp_path / "run"
    assert result.returncode == 0, explain(result)

    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2]
    for r in rows:
        assert 0.0 <= r["test_accuracy"] <= 1.0
        assert r["bytes_up"] > 0 and r["bytes_down"] > 0
        assert r["num_clients"] == 2 and r["num_failures"] == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["rounds"] == 2 and summary["algorithm"] == "fedpfn"
    config = json.loads((run / "config.json").read_text())
    assert config["num_clients"] == 2 and config["clients_per_round"] == 2
    assert config["out"] == str(run)

    superlink = read_log(work, "superlink.log")
    assert "Uvicorn running on https://127.0.0.1" in superlink  # TLS
    assert "SuperNode authentication is disabled" not in superlink
    activated = set(re.findall(r"\[Fleet\.ActivateNode\] Activated node_id=(\d+)", superlink))
    assert len(activated) == 2, activated
    for i in range(2):
        assert "Receiving: train message" in read_log(work, f"supernode-{i}.log")
    assert_nothing_left(work)
    print(f"deployment with 2 SuperNodes, 2 rounds: {seconds:.0f} s")


@pytest.mark.deploy
@needs_openssl
def test_unregistered_supernode_is_refused_and_run_completes(tmp_path: Path) -> None:
    started = time.monotonic()
    result = run_deploy(tmp_path, "--rounds", "1", nodes=2, unauthorized=1)
    seconds = time.monotonic() - started
    work, run = tmp_path / "work", tmp_path / "run"
    assert result.returncode == 0, explain(result)
    assert "unregistered SuperNode 0 was refused" in result.stdout

    rogue = read_log(work, "supernode-unregistered-0.log")
    assert "Failed to activate SuperNode" in rogue
    assert "SuperNode ID:" not in rogue and "Receiving:" not in rogue
    assert "No SuperNode found with the given public key" in read_log(work, "superlink.log")

    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [1]
    assert rows[0]["num_clients"] == 2 and 0.0 <= rows[0]["test_accuracy"] <= 1.0
    assert (run / "summary.json").exists()
    for i in range(2):
        assert "Receiving: train message" in read_log(work, f"supernode-{i}.log")
    assert_nothing_left(work)
    print(f"deployment with 2 SuperNodes + 1 unregistered, 1 round: {seconds:.0f} s")


@pytest.mark.deploy
@needs_openssl
def test_interrupted_deployment_stops_everything_it_started(tmp_path: Path) -> None:
    base = free_port_block(3)
    proc = subprocess.Popen(
        ["bash", str(DEPLOY), "--nodes", "2", "--rounds", "50", "--base-port", str(base),
         "--work-dir", str(tmp_path / "work"), "--out", str(tmp_path / "run")],
        cwd=tmp_path, env=script_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
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
