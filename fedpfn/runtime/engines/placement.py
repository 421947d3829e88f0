"""Where a run's clients may go: one set of placement checks for both engines.

Every check here runs in an engine's `prepare`, before the run folder is claimed, so a request
that cannot be met is one line and exit 2, never a wait:

- this machine: `client_cpus` within its CPUs, a GPU asked for only where one is visible;
- the environment: `RAY_ADDRESS` redirects `ray.init`, so where fedpfn would start Ray of
  its own it must not be set (or must name the cluster `--ray-address` names);
- a Ray cluster (`--ray-address`): joined, its nodes and resources read (`ray.nodes()`,
  `ray.available_resources()`), and the batched engine's actors planned on them: one per GPU
  where there are GPUs, else one per node (or `--engine-workers` of them, spread over the
  nodes) with the CPUs its node offers, each pinned to its node. A plan the cluster cannot
  hold is refused naming what is missing and what is there.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from fedpfn.core.config import RunConfig
from fedpfn.core.settings import ConfigError
from fedpfn.runtime import env
from fedpfn.runtime.engines.ray_start import init_ray
from fedpfn.runtime.resources import cpus_problem

RAY_ADDRESS = "RAY_ADDRESS"
FREE_WAIT_SECONDS = 10.0  # for resources an ended run let go of to show as free


def local_problem(cfg: RunConfig) -> str | None:
    """Why this machine cannot give a client what the config asks (CPUs, a GPU), or None."""
    placed = cfg.placement
    if problem := cpus_problem(placed.client_cpus, os.cpu_count() or 1):
        return problem
    if placed.client_gpus and not torch.cuda.is_available():
        return f"client_gpus: {placed.client_gpus:g} asks for a GPU but none is visible; use --client-gpus 0"
    return None


def ray_env_problem(cfg: RunConfig) -> str | None:
    """Why `RAY_ADDRESS` in the environment would send a run that starts Ray elsewhere, or None.

    `ray.init` joins the cluster `RAY_ADDRESS` names whatever it is given, so a run meant to
    start Ray here would go to (or wait for) a cluster config.json does not name.
    """
    placed = cfg.placement
    named = os.environ.get(RAY_ADDRESS)
    if not named or placed.ray_address in (named, "auto"):  # 'auto' means RAY_ADDRESS where it is set
        return None
    if placed.ray_address:
        return f"ray_address: '{placed.ray_address}' but {RAY_ADDRESS}='{named}' in the environment; unset one of them"
    return (
        f"{RAY_ADDRESS}='{named}' is set in the environment: Ray would join that cluster instead of starting here; "
        f"pass --ray-address {named} to run on it, or unset {RAY_ADDRESS}"
    )


@dataclass(frozen=True)
class Node:
    """A Ray node as the placement sees it."""

    node_id: str | None  # Ray's node id; None for this machine before Ray starts
    address: str
    cpus: int
    gpus: int

    @property
    def name(self) -> str:
        """The address, with the start of Ray's node id (nodes may share an address)."""
        return self.address if self.node_id is None else f"{self.address} node {self.node_id[:8]}"

    def __str__(self) -> str:
        return f"{self.name} ({self.cpus} CPU, {self.gpus} GPU)"


@dataclass(frozen=True)
class Slot:
    """One actor's place: its node and what it reserves there."""

    node: Node
    cpus: int
    gpus: int

    def options(self) -> dict[str, Any]:
        """`ray.remote(...).options(...)` for this slot: its resources, pinned to its node."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        pinned = {} if self.node.node_id is None else {
            "scheduling_strategy": NodeAffinitySchedulingStrategy(self.node.node_id, soft=False)
        }  # fmt: skip
        return {"num_cpus": self.cpus, "num_gpus": self.gpus, **pinned}


def this_machine() -> list[Node]:
    """This machine as the one node a local Ray will have (fedpfn starts it with every CPU and GPU)."""
    return [Node(None, "this machine", os.cpu_count() or 1, torch.cuda.device_count())]


def cluster_nodes() -> list[Node]:
    """The joined cluster's live nodes with their CPUs and GPUs (ray.nodes())."""
    import ray

    return [
        Node(n["NodeID"], n["NodeManagerAddress"], int(n["Resources"].get("CPU", 0)), int(n["Resources"].get("GPU", 0)))
        for n in ray.nodes()
        if n.get("Alive") and n.get("Resources")
    ]


def described(nodes: list[Node], where: str) -> str:
    return f"{where} has {len(nodes)} node(s): " + ", ".join(map(str, nodes))


def plan_actors(nodes: list[Node], cfg: RunConfig, where: str) -> list[Slot]:
    """The batched engine's actors on `nodes`: one per GPU (unless `client_gpus` is 0), else
    one per node with its CPUs, or `engine_workers` spread over the nodes (ConfigError if not)."""
    placed = cfg.placement
    gpus = sum(node.gpus for node in nodes)
    if placed.client_gpus and not gpus:
        raise ConfigError(f"client_gpus: {placed.client_gpus:g} asks for a GPU, but {described(nodes, where)}")
    if gpus and placed.client_gpus != 0:
        per_gpu = [Slot(node, node.cpus // node.gpus, 1) for node in nodes for _ in range(node.gpus)]
        return take(spread(per_gpu), cfg.engine.engine_workers, "a GPU", nodes, where)
    if cfg.engine.engine_workers is None:
        slots = [Slot(node, node.cpus, 0) for node in nodes if node.cpus]
        if not slots:
            raise ConfigError(f"the batched engine's actors need a CPU each, but {described(nodes, where)}")
        return slots
    per_cpu = spread([Slot(node, 1, 0) for node in nodes for _ in range(node.cpus)])
    chosen = take(per_cpu, cfg.engine.engine_workers, "a CPU", nodes, where)
    return [Slot(s.node, s.node.cpus // sum(c.node == s.node for c in chosen), 0) for s in chosen]


def spread(slots: list[Slot]) -> list[Slot]:
    """The slots reordered round-robin over their nodes, so the first k cover as many nodes as k can."""
    by_node: dict[Node, list[Slot]] = {}
    for slot in slots:
        by_node.setdefault(slot.node, []).append(slot)
    rounds = max((len(v) for v in by_node.values()), default=0)
    return [group[i] for i in range(rounds) for group in by_node.values() if i < len(group)]


def take(slots: list[Slot], workers: int | None, unit: str, nodes: list[Node], where: str) -> list[Slot]:
    """The first `workers` slots (all when None), refused when there are fewer."""
    if workers is None:
        return slots
    if workers > len(slots):
        raise ConfigError(f"engine_workers: {workers} actors need {unit} each, but {described(nodes, where)}")
    return slots[:workers]


def check_free(slots: list[Slot], where: str, wait: float = FREE_WAIT_SECONDS) -> None:
    """Refuse a plan whose CPUs or GPUs other work on the cluster holds (it would wait for them);
    resources an ended run let go of may take a moment to show as free."""
    import ray

    wanted = {"CPU": sum(slot.cpus for slot in slots), "GPU": sum(slot.gpus for slot in slots)}
    deadline = time.monotonic() + wait
    while short := {k: v for k, v in wanted.items() if v > ray.available_resources().get(k, 0) + 1e-9}:
        if time.monotonic() > deadline:
            key, need = next(iter(short.items()))
            raise ConfigError(
                f"the batched engine's {len(slots)} actor(s) need {need} {key}, but {where} has "
                f"{ray.available_resources().get(key, 0):g} free (the rest is held by other work)"
            )
        time.sleep(0.5)


def join(address: str) -> None:
    """This process joined to the Ray cluster at `address` (once), with the code path Flower's
    Ray backend gives its workers (the same checkout on every node finds the project)."""
    init_ray(address=address)


def cluster_checked(cfg: RunConfig, check: Any) -> Any:
    """`check(nodes, where)` on the cluster at `cfg.ray_address`, joined for it; a refusal leaves it."""
    import ray

    placed = cfg.placement
    assert placed.ray_address
    env.check_ray_address(placed.ray_address)
    join(placed.ray_address)
    try:
        return check(cluster_nodes(), f"the Ray cluster at {placed.ray_address}")
    except ConfigError:
        ray.shutdown()
        raise


def batched_slots(cfg: RunConfig) -> list[Slot]:
    """The batched engine's actors: on the joined cluster, or on this machine's Ray; checked."""
    if cfg.placement.ray_address:
        return cluster_checked(cfg, lambda nodes, where: checked_plan(nodes, cfg, where))
    return plan_actors(this_machine(), cfg, "this machine")


def checked_plan(nodes: list[Node], cfg: RunConfig, where: str) -> list[Slot]:
    slots = plan_actors(nodes, cfg, where)
    check_free(slots, where)
    return slots


def client_fits(cfg: RunConfig) -> None:
    """The Ray engine on a cluster: refused unless some node holds one client's CPUs and GPU share."""

    def check(nodes: list[Node], where: str) -> None:
        gpus = cfg.placement.client_gpus or 0.0
        if not any(node.cpus >= cfg.placement.client_cpus and node.gpus >= gpus for node in nodes):
            wanted = f"{cfg.placement.client_cpus:g} CPU" + (f" and {gpus:g} GPU" if gpus else "")
            raise ConfigError(f"client_cpus, client_gpus: a client needs {wanted} on one node, but {described(nodes, where)}")

    cluster_checked(cfg, check)


def check_placement(cfg: RunConfig, uses_ray: bool, plan: Callable[[RunConfig], object] | None) -> None:
    """Every engine's placement checks, in one order, before anything starts: Ray's environment
    where Ray runs, this machine's CPUs and GPUs unless a cluster is joined, then `plan`
    (joining the cluster and reading its nodes, where there is one)."""
    if uses_ray and (problem := ray_env_problem(cfg)):
        raise ConfigError(problem)
    if not cfg.placement.ray_address and (problem := local_problem(cfg)):
        raise ConfigError(problem)
    if plan is not None:
        plan(cfg)
