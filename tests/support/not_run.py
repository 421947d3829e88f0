"""Why a command the README or a page shows cannot run here as written (a real deployment's hosts,
a Ray cluster, hours of training, the network, the machine's firewall), and what of it can be
checked instead: a table of command shapes (tests/support/site_commands.py runs the others)."""

from __future__ import annotations

from typing import NamedTuple

DEPLOYMENT = "needs the hosts of a real deployment (TLS certificates, registered keys, open ports); tests/deploy/test_deploy.py rehearses one"
CLUSTER = "needs a Ray cluster of the reader's machines"
HOURS = "trains for minutes to hours"


class NotRun(NamedTuple):
    why: str
    checked: str  # "help": its flags against its --help; "settings": a run's; "run config": Flower's fusion


def why_not_run(words: list[str]) -> NotRun | None:
    """Why a command cannot run here as written (None: it runs, up to where training would start)."""
    match words:
        case ["sudo", *_]:
            return NotRun("changes this machine's firewall", "")
        case ["git", "worktree", *_]:
            return NotRun("COMMIT stands for a commit of the reader's choosing", "")
        case [*_, "..."]:
            return NotRun("`...` stands for the arguments of the commands above it", "help")
        case _ if any(word.startswith("[") for word in words):
            return NotRun("a synopsis of every setting, not one command", "help")
        case ["flower-superlink" | "flower-supernode", *_] | ["flwr", "supernode" | "log" | "stop", *_]:
            return NotRun(DEPLOYMENT, "help")
        case ["flwr", "ls", *_]:
            return NotRun(
                "asks a running SuperLink (tests/deploy/test_flower_route.py runs `flwr ls` against one)", "help"
            )
        case ["flwr", "run", ".", federation, *_] if not federation.startswith("-"):
            return NotRun(
                f"runs on the federation `{federation}` of a real deployment or cluster", "run config"
            )
        case ["ray", *_]:
            return NotRun(CLUSTER, "help")
        case ["python", "run_sim.py", *args] | ["fedpfn", "run", *args] if "--ray-address" in args:
            return NotRun(CLUSTER, "settings")
        case ["python", "run_sim.py", *args] | ["fedpfn", "run", *args] if "--download" in args:
            return NotRun("downloads the dataset", "settings")
    return why_it_takes_long(words)


def why_it_takes_long(words: list[str]) -> NotRun | None:
    """`why_not_run` of the commands that would run here for minutes to hours, or until stopped."""
    match words:
        case ["scripts/deploy_local.sh", *args] if args != ["--help"]:
            return NotRun(
                "a deployment of several processes for minutes; tests/deploy/test_deploy.py runs its rehearsal",
                "help",
            )
        case [_, "benchmarks/bench_clientapp_startup.py", *_]:
            return NotRun("deploys the app several times over (minutes)", "help")
        case ["python", "scripts/export_partition.py", *args] if any(
            arg.startswith("0=/srv/") for arg in args
        ):
            return NotRun("reads an earlier run's folder and writes into /srv on a SuperNode host", "help")
        case ["fedpfn", "pretrain" | "soup" | "cold", *args] | [
            "python",
            "-m",
            "fedpfn.experiments.pretrain" | "fedpfn.experiments.soup" | "fedpfn.experiments.cold",
            *args,
        ] if "--help" not in args:
            return NotRun(HOURS, "help")
        case ["fedpfn", "report", *args] if "--help" not in args:
            return NotRun("reads the run folders an earlier comparison wrote (hours of training)", "help")
        case ["fedpfn", "seeds-needed", folder, *_] if folder.startswith("runs/tutorial/"):
            return NotRun("reads the tutorial's comparison, which tests/integration/test_tutorial.py runs before it", "help")
        case ["fedpfn", "study", "run", *_]:
            return NotRun(HOURS + " (tests/studies/test_study.py runs a tiny study end to end)", "help")
        case ["fedpfn", "study", "page", "--stored", *_]:
            return NotRun(
                "rewrites a page from its stored results (a minute; tests/studies/test_drift_study.py, "
                "tests/studies/test_alignment_federated_study.py and tests/studies/test_study_pages.py check the committed pages)",
                "help",
            )
        case ["tensorboard", *_]:
            return NotRun("serves until stopped", "help")
        case ["python", "-m", "pytest", *_]:
            return NotRun("the test suite itself, which this test is part of", "help")
    return None
