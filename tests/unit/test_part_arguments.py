"""Arguments to Flower's parts and flwr-datasets' partitioners (fedpfn.core.kwargs), probed as a
careful user and an attacker would (issue 58): every bad value is one `error:` line naming it,
exit 2, before any engine starts and before the run folder is made; a value the run would drop
without a word (an empty --server-wrap) is refused too, and a budget the header announces is one
the run records."""

from __future__ import annotations

import pytest

import run_sim
from tests.support.commands import no_engine_starts
from tests.support.config import tiny_config

DP = "flwr.serverapp.strategy:DifferentialPrivacyServerSideFixedClipping"
TINY = ["--model", "mlp", "--num-clients", "4", "--clients-per-round", "2", "--partition", "iid"]


def wrap(args: str) -> list[str]:
    return ["--server-wrap", DP, "--server-wrap-args", args]


def flwr_partition(name: str, args: str) -> list[str]:
    return ["--partition", f"flwr:{name}", "--partition-args", args]


LDP = ["--engine", "ray", "--client-mod", "flwr.clientapp.mod:LocalDpMod", "--client-mod-args"]
DEEP = '{"alpha": ' + "[" * 100 + "0.5" + "]" * 100 + "}"
CASES = [
    (wrap('{"noise_multiplier": NaN, "clipping_norm": 1}'), "server_wrap_args: noise_multiplier is NaN; give a finite number"),
    (wrap('{"noise_multiplier": Infinity, "clipping_norm": 1}'), "server_wrap_args: noise_multiplier is Infinity; give a finite"),
    (wrap('{"noise_multiplier": 1e308, "clipping_norm": 1}'), "server_wrap_args: noise_multiplier is 1e+308; give a number "
     "from 1e-12 to 1e+12 in size (or 0)"),
    (["--server", "flwr.serverapp.strategy:Krum", "--server-args", '{"num_malicious_nodes": ' + "9" * 4000 + "}"],
     "server_args: num_malicious_nodes is 99999999999999999999"),
    (wrap('{"noise_multiplier": 1e-300, "clipping_norm": 1}'), "server_wrap_args: noise_multiplier is 1e-300; give a number"),
    (wrap('{"noise_multiplier": true, "clipping_norm": 1}'),
     "server_wrap_args: noise_multiplier is true; DifferentialPrivacyServerSideFixedClipping takes a number there"),
    (wrap('{"noise_multiplier": 1, "clipping_norm": NaN}'), "server_wrap_args: clipping_norm is NaN; give a finite number"),
    (wrap('{"noise_multiplier": 1, "clipping_norm": -Infinity}'), "server_wrap_args: clipping_norm is -Infinity; give a finite"),
    ([*LDP, '{"clipping_norm": 1, "sensitivity": 1, "epsilon": NaN, "delta": 1e-5}'],
     "client_mod_args: epsilon is NaN; give a finite number"),
    (["--server", "flwr.serverapp.strategy:Krum", "--server-args", '{"num_malicious_nodes": 1.5}'],
     "server_args: num_malicious_nodes is 1.5; Krum takes a whole number there"),
    (flwr_partition("DirichletPartitioner", DEEP), "partition_args: '{\"alpha\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[...' "
     "nests deeper than 8 levels; give a JSON object of plain values"),
    (flwr_partition("DirichletPartitioner", '{"alpha": ' + "9" * 5000 + "}"), "holds a number too long to read"),
    (flwr_partition("DirichletPartitioner", '{"alpha": [0.5, NaN]}'), "partition_args: alpha is NaN; give a finite number"),
    (flwr_partition("PathologicalPartitioner", '{"num_classes_per_partition": true}'),
     "partition_args: num_classes_per_partition is true; PathologicalPartitioner takes a whole number there"),
    (["--server-wrap", ""], "server_wrap: '' names no wrapper; give package.module:Name (docs/guide/privacy.md), or "
     "leave --server-wrap out"),
    (["--engine", "ray", "--client-mod", ""], "client_mod: '' names no mod; give package.module:Name"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "says"), CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_a_bad_argument_is_one_line_before_anything_starts(args, says, tmp_path, capsys, monkeypatch):
    no_engine_starts(monkeypatch, lambda *_a, **_k: pytest.fail("an engine was about to start"))
    out = tmp_path / "run"
    assert run_sim.main([*TINY, *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and says in err and err.count("\n") == 1, err
    assert not out.exists()


def test_a_presets_arguments_are_checked_as_the_command_lines_are(tmp_path, capsys):
    preset = tmp_path / "preset.toml"
    preset.write_text(f'partition = "flwr:DirichletPartitioner"\npartition-args = \'{{"alpha": {"9" * 5000}}}\'\n')
    assert run_sim.main(["--config", str(preset), *TINY[:6], "--out", str(tmp_path / "run")]) == 2
    assert "partition_args: '{\"alpha\": 9999" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("noise", "announced"), [(1.0, True), (0.0, False)])
def test_the_header_announces_a_budget_exactly_where_the_run_records_one(noise: float, announced: bool):
    """`noise_multiplier: true` added noise and recorded no ε while the header announced a budget (issue 58)."""
    from fedpfn.runtime.plugins import wrapper_line
    from strategies.privacy import budget_for
    from strategies.wrapping import plugins_of, wrapper_kwargs

    cfg = tiny_config(server_wrap=DP, server_wrap_args=f'{{"noise_multiplier": {noise}, "clipping_norm": 1}}')
    params = plugins_of(cfg)
    recorded = budget_for(wrapper_kwargs(params, 2), 0.5, params.dp_delta) is not None
    assert recorded is announced
    assert ("(ε, δ=1e-05) by Opacus" in wrapper_line(cfg)[0]) is announced


def test_a_number_where_the_class_takes_anything_is_checked_for_finiteness_only() -> None:
    from fedpfn.core.kwargs import check_kinds, number_kinds

    class Anything:
        def __init__(self, value, flag: bool = False, ratio: float | None = None) -> None: ...

    check_kinds(Anything, {"value": True, "flag": True, "ratio": None}, "x")  # no number annotated: no complaint
    assert number_kinds(float | None) == {float, type(None)} and number_kinds(list[float]) is None


def test_a_wrapper_given_is_not_taken_for_an_empty_one() -> None:
    """'' is refused; a path given is not: the refusal reads the value given, not only its name."""
    from fedpfn.runtime.algorithms import problems

    cfg = tiny_config(server_wrap=DP, server_wrap_args='{"noise_multiplier": 1, "clipping_norm": 1}')
    assert problems(cfg, given={"server_wrap", "server_wrap_args"}) == []
