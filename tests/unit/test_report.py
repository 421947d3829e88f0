"""fedpfn.analysis.report on synthetic run folders with known numbers: the statistics a reader trusts.

The folders are written here as a run writes them (config.json, metrics.jsonl, summary.json
last), so the report is tested without training anything.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest

from fedpfn.analysis.plots import bytes_figure
from fedpfn.analysis.render import TRAFFIC_KEYS, csv_text, markdown, report_json, rewrite_tables
from fedpfn.analysis.runs import load_runs
from fedpfn.analysis.stats import TRAFFIC, Report, analyse
from fedpfn.core.files import OwnOutputs
from fedpfn.core.settings import ConfigError
from tests.support.folders import FEDAVG_FINAL, FEDPFN_FINAL, run_report, write_run

T_975_3DF = 3.182446305284263  # Student's t, 0.975 quantile, 3 degrees of freedom (printed tables: 3.182)


# Final accuracies per seed; the paired differences fedpfn - fedavg are 0.02, -0.01, 0.03, 0.04.


@pytest.fixture
def study(tmp_path: Path) -> Path:
    """Two arms, four seeds, 6 rounds; the last 3 rounds are 0.5, 0.6 and the final accuracy."""
    for seed, (avg, pfn) in enumerate(zip(FEDAVG_FINAL, FEDPFN_FINAL)):
        write_run(tmp_path / "study" / f"fedavg-s{seed}", [0.1, 0.2, 0.3, 0.5, 0.6, avg], seed=seed)
        provenance = {"git": f"commit-{seed}"}  # differs per run, and must not split an arm
        write_run(tmp_path / "study" / f"fedpfn-s{seed}", [0.1, 0.2, 0.3, 0.5, 0.6, pfn], seed=seed,
                  algorithm="fedpfn", anchor_ratio=0.4, provenance=provenance)  # fmt: skip
    return tmp_path / "study"


def test_paired_interval_matches_a_hand_computation(study: Path, capsys) -> None:
    """scipy's interval and p (ttest_rel) against Student's t worked by hand from a printed quantile."""
    code, out, err = run_report(capsys, study, "--last-k", "3", "--target", "0.8")
    assert code == 0, err
    report = json.loads((study / "report.json").read_text())
    diffs = [0.02, -0.01, 0.03, 0.04]
    mean = sum(diffs) / 4  # 0.02
    std = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 3)  # n-1
    half = T_975_3DF * std / math.sqrt(4)
    final = next(p for p in report["paired"] if p["label"] == "fedpfn" and p["metric"] == "final")
    assert final["diffs"] == pytest.approx(diffs)
    assert final["mean"] == pytest.approx(mean)
    assert final["std"] == pytest.approx(std)
    assert (final["low"], final["high"]) == pytest.approx((mean - half, mean + half))
    # p is Student's t (0.161), the test of the interval; beside it the exact sign-flip test: of the 16 sign
    # patterns of |diffs| = 0.02, 0.01, 0.03, 0.04, four reach |sum| >= 0.08 (none or only 0.01 flipped, ±)
    assert (final["test"], final["p_exact"], final["p_floor"]) == ("t", 0.25, 0.125)
    assert final["p_value"] == pytest.approx(0.1612, abs=1e-4)
    assert final["wins"] == 3 and final["ties"] == 0
    # the last-3 window is (0.5 + 0.6 + final) / 3, so its differences are a third of the finals'
    window = next(p for p in report["paired"] if p["label"] == "fedpfn" and p["metric"] == "lastk")
    assert window["mean"] == pytest.approx(mean / 3) and window["wins"] == 3
    interval = f"[{100 * (mean - half):+.2f}, {100 * (mean + half):+.2f}]"
    assert f"| fedpfn | final round | {100 * mean:+.2f} | {interval} | 0.161 (exact 0.25) | 0.161 | 3 of 4 |" in out


def test_arm_statistics_use_the_sample_std_and_say_so(study: Path, capsys) -> None:
    code, out, _ = run_report(capsys, study, "--last-k", "3", "--target", "0.8")
    assert code == 0
    rows = {row["arm"]: row for row in csv.DictReader(open(study / "report.csv"))}
    assert set(rows) == {"fedavg", "fedpfn"}  # provenance did not split fedpfn's seeds
    mean = sum(FEDAVG_FINAL) / 4
    std = math.sqrt(sum((a - mean) ** 2 for a in FEDAVG_FINAL) / 3)
    assert float(rows["fedavg"]["final_acc_mean"]) == pytest.approx(mean)
    assert float(rows["fedavg"]["final_acc_std"]) == pytest.approx(std)
    # 80 % is reached at round 6 only: by fedavg seeds 0, 1 (0.80, 0.85) and fedpfn seeds 0, 1 (0.82, 0.84)
    assert rows["fedavg"]["reached_target"] == "2" and float(rows["fedavg"]["rounds_to_target_mean"]) == 6
    assert rows["fedpfn"]["reached_target"] == "2"
    # the cell says over how many seeds its mean is taken: never readable as an all-seed mean
    assert "| 6.0 (2 of 4 seeds) |" in out and "seeds that reached it" in out
    assert float(rows["fedavg"]["mb_up_total"]) == pytest.approx(12.0)
    assert float(rows["fedavg"]["mb_up_per_round"]) == pytest.approx(2.0)
    assert "std over seeds, n-1" in out and "Student's t" in out
    assert "last 3 of 6 rounds" in out
    for name in (
        "report.md",
        "report.csv",
        "report.json",
        "report.png",
        "paired_differences.png",
        "report_bytes.png",
    ):
        assert (study / name).stat().st_size > 0, name


def test_window_names_the_rounds_a_short_run_has(tmp_path: Path, capsys) -> None:
    for seed in (0, 1):
        write_run(tmp_path / f"fedavg-s{seed}", [0.2, 0.4, 0.6 + seed / 10], seed=seed)
    code, out, _ = run_report(capsys, tmp_path, "--last-k", "5")
    assert code == 0
    assert "last 3 of 3 rounds" in out and "last 5" not in out
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["window"] == "last 3 of 3 rounds"
    assert report["arms"][0]["runs"][1]["lastk_acc"] == pytest.approx((0.2 + 0.4 + 0.7) / 3)
    assert "One arm only" in out and not (tmp_path / "paired_differences.png").exists()


def test_rounds_without_evaluation_are_skipped(tmp_path: Path, capsys) -> None:
    accuracies = [None, 0.85, None, 0.5, None, 0.7]  # evaluated every 2 rounds
    for seed in (0, 1):
        write_run(tmp_path / f"fedavg-s{seed}", accuracies, seed=seed, eval_every=2)
    code, out, err = run_report(capsys, tmp_path, "--last-k", "2", "--target", "0.8")
    assert code == 0, err
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["window"] == "last 2 evaluated rounds (4, 6 of 6)"
    assert report["arms"][0]["lastk_acc_mean"] == pytest.approx(0.6)
    assert report["arms"][0]["rounds_to_target_mean"] == 2


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"alpha": 0.5}, ["alpha differs between arms: 0.1 in", "fedavg-s0 and 1 more; 0.5 in ", "fedpfn-s"]),
        ({"rounds": 4}, ["rounds differs between arms: 3 in ", "fedavg-s0 and 1 more; 4 in "]),
        ({"seed": 1}, ["the arms have different seeds: 'fedavg' has seeds 0, 1", "'fedpfn' has seeds 1, 2"]),
    ],
)
def test_arms_of_other_settings_are_refused(tmp_path: Path, capsys, changes: dict, expected: list) -> None:
    """`changes` applies to fedpfn's runs: a setting, the run length, or a shift of its seeds."""
    for seed in (0, 1):
        write_run(tmp_path / f"fedavg-s{seed}", [0.5, 0.6, 0.7], seed=seed)
        accuracies = [0.5, 0.6, 0.7, 0.8][: changes.get("rounds", 3)]
        alpha, shifted = changes.get("alpha", 0.1), seed + changes.get("seed", 0)
        write_run(tmp_path / f"fedpfn-s{seed}", accuracies, algorithm="fedpfn", alpha=alpha, seed=shifted)
    code, out, err = run_report(capsys, tmp_path)
    assert code == 2 and out == "" and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: runs are not comparable: ")
    assert all(text in lines[0] for text in expected), lines[0]
    assert not (tmp_path / "report.md").exists()


def test_unfinished_duplicate_and_unknown_inputs_are_refused(tmp_path: Path, capsys) -> None:
    write_run(tmp_path / "a" / "fedavg-s0", [0.5, 0.6], seed=0)
    write_run(tmp_path / "a" / "fedavg-s1", [0.5], seed=1, finished=False)
    code, _, err = run_report(capsys, tmp_path / "a")
    assert code == 2 and f"unfinished (no summary.json): {tmp_path / 'a' / 'fedavg-s1'}" in err
    write_run(tmp_path / "b" / "fedavg-s0", [0.5, 0.6], seed=0)
    write_run(tmp_path / "b" / "copy-of-s0", [0.5, 0.7], seed=0)
    code, _, err = run_report(capsys, tmp_path / "b")
    assert code == 2 and "arm 'fedavg' has seed 0 more than once" in err
    write_run(tmp_path / "c" / "fedavg-s0", [0.5, 0.6], seed=0)
    code, _, err = run_report(capsys, tmp_path / "c", "--baseline", "fedprox")
    assert code == 2 and "baseline: no arm 'fedprox'; the arms are: fedavg" in err
    code, _, err = run_report(capsys, tmp_path / "nowhere")
    assert code == 2 and "is not a folder" in err
    write_run(tmp_path / "e" / "fedavg-s0", [0.5, None], seed=0)
    code, _, err = run_report(capsys, tmp_path / "e")
    assert code == 2 and "the last round has no test_accuracy" in err


def test_labels_name_what_tells_arms_of_one_algorithm_apart(tmp_path: Path, capsys) -> None:
    arms = {
        "fedavg": {},
        "fedavgm": {"server": "fedavgm"},
        "pfn": {"algorithm": "fedpfn", "anchor_ratio": 0.4},
        "pfn-m": {"algorithm": "fedpfn", "anchor_ratio": 0.4, "server": "fedavgm"},
        "pnu-2": {"algorithm": "fedpnu", "anchor_ratio": 0.2},
        "pnu-6": {"algorithm": "fedpnu", "anchor_ratio": 0.6},
    }
    for name, settings in arms.items():
        for seed in (0, 1):
            write_run(tmp_path / f"{name}-s{seed}", [0.5 + seed / 10, 0.6], seed=seed, **settings)
    code, out, err = run_report(capsys, tmp_path, "--baseline", "fedavg server=fedavgm")
    assert code == 0, err
    labels = [row["arm"] for row in csv.DictReader(open(tmp_path / "report.csv"))]
    assert labels[0] == "fedavg server=fedavgm"  # the baseline comes first
    assert sorted(labels) == sorted(
        ["fedavg", "fedavg server=fedavgm", "fedpfn", "fedpfn server=fedavgm",
         "fedpnu anchor_ratio=0.2", "fedpnu anchor_ratio=0.6"]
    )  # fmt: skip
    assert "Arms differ in: algorithm, anchor_ratio (" in out


def test_arms_are_listed_in_the_order_their_folders_were_given(tmp_path: Path, capsys) -> None:
    """The baseline first, then the others as given (a ratio sweep reads 0.2, 0.4, 0.6)."""
    for name, ratio in (("pnu", 0.4), ("pnu-r0.2", 0.2), ("pnu-r0.6", 0.6)):
        for seed in (0, 1):
            write_run(tmp_path / name / f"s{seed}", [0.5, 0.6 - ratio / 10], seed=seed, algorithm="fedpnu",
                      anchor_ratio=ratio)  # fmt: skip
    for seed in (0, 1):
        write_run(tmp_path / "avg" / f"s{seed}", [0.5, 0.6], seed=seed)
    order = ["avg", "pnu-r0.2", "pnu", "pnu-r0.6"]
    code, _, err = run_report(capsys, *(tmp_path / name for name in order), "--out", tmp_path / "report")
    assert code == 0, err
    labels = [row["arm"] for row in csv.DictReader(open(tmp_path / "report" / "report.csv"))]
    ratios = [f"fedpnu anchor_ratio={r}" for r in ("0.2", "0.4", "0.6")]
    assert labels == ["fedavg", *ratios]


def test_the_results_pages_in_short_claims_only_what_each_test_supports(study: Path, capsys) -> None:
    """The earlier study's conclusion (studies.earlier.text), read off fedpfn.analysis.report's
    JSON for the `study` fixture, whose fedpfn - fedavg differences (+2, -1, +3, +4 points at the end) hold 0.
    The t test whose interval is printed decides at any number of seeds: 5 seeds whose interval lies below 0
    read "lower", though the exact test beside it cannot go below 0.0625."""
    from fedpfn.analysis.inference import compare
    from studies.earlier import text as page

    lower = compare("a", "lastk", [0, 1, 2, 3, 4, 5], [-0.02, -0.03, -0.025, -0.02, -0.03, -0.028], 1.0)
    lower.p_holm = lower.p_value
    assert page.claim(lower) == "lower than"
    five = compare("a", "lastk", [0, 1, 2, 3, 4], [-0.02, -0.03, -0.025, -0.02, -0.03], 1.0)
    five.p_holm = five.p_value
    assert five.high is not None and five.high < 0 and page.claim(five) == "lower than"  # t excludes 0; exact cannot
    holm_only = compare("a", "lastk", [0, 1, 2, 3, 4], [-0.02, -0.03, -0.025, -0.02, -0.03], 1.0)
    holm_only.p_holm = 0.2  # the interval excludes 0, the family's correction does not
    assert page.claim(holm_only) == "not resolved from"

    code, _, err = run_report(capsys, study, "--out", study / "report")
    assert code == 0, err
    result = json.loads((study / "report" / "report.json").read_text())
    last = next(p for p in result["paired"] if p["metric"] != "final")
    assert last["low"] < 0 < last["high"]
    lines = page.in_short([("Heading", result)], seeds=4)
    shown = f"{100 * last['mean']:+.2f} [{100 * last['low']:+.2f}, {100 * last['high']:+.2f}]"  # with its 95 % interval
    assert f"- not resolved from the baseline: fedpfn in *Heading* ({shown}, p Holm 0.16)." in lines
    assert "- higher than the baseline: none." in lines and "- lower than the baseline: none." in lines
    assert "Holm over the 1 comparisons listed" in lines[0]
    five_seeds = page.in_short([("Heading", result)], seeds=5)  # 4 seeds: left out of a 5-seed conclusion
    assert all(f"- {claim} the baseline: none." in five_seeds for claim in page.CLAIMS)
    assert page.in_short([]) == []
    twice = page.in_short([("Heading", result), ("Sweep", result)], seeds=4)  # the same runs in two sections
    assert "Holm over the 1 comparisons listed" in twice[0]
    assert f"- not resolved from the baseline: fedpfn in *Heading* and *Sweep* as fedpfn ({shown}, p Holm 0.16)." in twice


def analysed(folder: Path, **kwargs: Any) -> Report:
    """The report's numbers for the runs below `folder`, without writing its files."""
    return analyse(load_runs([folder]), **kwargs)


def test_holm_adjusts_the_arms_of_one_metric_together(tmp_path: Path) -> None:
    """Three arms against fedavg on 6 seeds (Student's t: up to 5, the exact test, whose floor would
    tie them); fedpnu's p (0.03) is under 0.05 alone, not after Holm."""
    base = [0.50, 0.60, 0.55, 0.45, 0.52, 0.58]
    diffs = {
        "fedpfn": [0.10, 0.11, 0.12, 0.13, 0.10, 0.12],
        "fedpnu": [0.02, 0.03, 0.01, 0.04, -0.005, 0.02],
        "fedprox": [0.02, -0.01, 0.03, 0.04, -0.02, 0.01],
    }
    for seed, acc in enumerate(base):
        write_run(tmp_path / f"fedavg-s{seed}", [acc], seed=seed)
        for algorithm, d in diffs.items():
            write_run(tmp_path / f"{algorithm}-s{seed}", [acc + d[seed]], seed=seed, algorithm=algorithm)
    report = analysed(tmp_path, k=1)
    window = {p.label: p for p in report.paired if p.metric == "lastk"}
    p = {label: window[label].p_value for label in diffs}
    assert p["fedpfn"] < p["fedpnu"] < p["fedprox"]  # Holm by hand: times 3, 2, 1, kept non-decreasing
    assert window["fedpfn"].p_holm == pytest.approx(3 * p["fedpfn"])
    assert window["fedpnu"].p_holm == pytest.approx(2 * p["fedpnu"])
    assert window["fedprox"].p_holm == pytest.approx(p["fedprox"])
    assert p["fedpnu"] < 0.05 < window["fedpnu"].p_holm
    text = markdown(report).splitlines()
    rows = {label: next(line for line in text if line.startswith(f"| {label} | mean of")) for label in diffs}
    assert rows["fedpfn"].endswith("| higher |")
    pnu, prox = window["fedpnu"], window["fedprox"]
    assert 0 < pnu.low and prox.low < 0 < prox.high
    low, high = math.sqrt(5 / 12.833), math.sqrt(5 / 0.8312)  # printed chi-square tables, 5 df: 97.5 % and 2.5 %

    def mde_text(p: Any) -> str:
        return f"MDE ±{100 * p.mde:.2f} (±{100 * low * p.mde:.2f} to ±{100 * high * p.mde:.2f}) |"

    # the cell: the verdict and the MDE; what is ruled out is the 95 % CI beside it, what each word means said once
    assert rows["fedpnu"].endswith(f"| not resolved after Holm; {mde_text(pnu)}")  # no 0 in its interval, Holm's p > 0.05
    assert rows["fedprox"].endswith(f"| not resolved; {mde_text(prox)}")
    assert f"| [+{100 * pnu.low:.2f}, +{100 * pnu.high:.2f}] |" in rows["fedpnu"]
    assert "'not resolved after Holm' where its interval excludes 0" in "\n".join(text)


def test_a_reports_tables_are_made_again_from_its_json_alone(uploads: Path, tmp_path: Path) -> None:
    """Where the runs are gone, `rewrite_tables` gives the report's Markdown, CSV and JSON from its
    JSON, byte for byte as from the runs (an arm without a test at equal bytes included)."""
    report, out = analysed(uploads), tmp_path / "report"
    out.mkdir()
    tables = {"report.md": markdown(report).encode(), "report.csv": csv_text(report).encode(),
              "report.json": (json.dumps(report_json(report), indent=2) + "\n").encode()}  # fmt: skip
    outputs = OwnOutputs(out, "fedpfn's report")  # as write_report records them, its figures left out
    for name, data in tables.items():
        outputs.write(name, data)
    assert rewrite_tables(out) == markdown(report)
    assert {name: (out / name).read_bytes() for name in tables} == tables
    (out / "report.md").write_text("a user's notes")  # not the report's own any more: refused, nothing written
    with pytest.raises(ConfigError, match="was not written by fedpfn's report"):
        rewrite_tables(out)
    assert (out / "report.md").read_text() == "a user's notes"


@pytest.fixture
def uploads(tmp_path: Path) -> Path:
    """Evaluated at rounds 2 and 4 of 4, 2 MB down a round; up a round: fedavg 2 MB, fedpnu 1.5 MB,
    fedprox 0.1 MB. fedpnu ends lower than fedavg at equal rounds, higher at equal upload."""
    for seed in range(3):
        write_run(tmp_path / f"fedavg-s{seed}", [None, 0.4, None, 0.8 + seed / 100], seed=seed, eval_every=2)
        write_run(tmp_path / f"fedpnu-s{seed}", [None, 0.5, None, 0.7 - seed / 50], seed=seed, eval_every=2,
                  up=1_500_000, algorithm="fedpnu")  # fmt: skip
        write_run(tmp_path / f"fedprox-s{seed}", [None, 0.3, None, 0.35], seed=seed, eval_every=2, up=100_000,
                  algorithm="fedprox")  # fmt: skip
    return tmp_path


def test_arms_are_compared_at_equal_bytes(uploads: Path) -> None:
    """fedpnu has sent 6 MB up after round 4, fedavg after round 3: fedavg's accuracy there lies
    halfway between its rounds 2 (4 MB) and 4 (8 MB), 0.6 + seed / 200."""
    report = analysed(uploads)
    up = {a.label: a for a in report.at_bytes if a.traffic == "up"}
    pnu = up["fedpnu"]
    assert (
        pnu.budget_mb == 6.0 and pnu.arm_round == {0: 4, 1: 4, 2: 4} and pnu.base_round == {0: 3, 1: 3, 2: 3}
    )
    assert pnu.base_acc == pytest.approx({s: 0.6 + s / 200 for s in range(3)})
    assert pnu.paired is not None and pnu.paired.diffs == pytest.approx([0.1, 0.075, 0.05])
    assert pnu.paired.low > 0  # higher at equal upload ...
    final = next(p for p in report.paired if p.label == "fedpnu" and p.metric == "final")
    assert final.high < 0  # ... lower at equal rounds
    # fedprox's 0.4 MB come before fedavg's first evaluation (round 2, 4 MB): no test, and none counted by Holm
    assert (
        up["fedprox"].paired is None and up["fedprox"].budget_mb == 0.4 and up["fedprox"].base_acc[0] is None
    )
    assert pnu.paired.p_holm == pnu.paired.p_value
    # up + down: fedpnu 3.5 MB a round (14 MB), fedavg 4 MB: 14 MB lies 3/4 from its 8 MB to its 16 MB
    both = next(a for a in report.at_bytes if a.traffic == "up_down" and a.label == "fedpnu")
    assert both.budget_mb == 14.0 and both.paired is not None
    assert both.paired.diffs == pytest.approx([0.0, -0.0275, -0.055])
    text = markdown(report)
    assert "### At equal upload\n" in text and "### At equal upload + download\n" in text
    assert f"| fedpnu | 6.00 | 4.0 / 3.0 | 68.00 / 60.50 | {100 * pnu.paired.mean:+.2f} |" in text
    assert "| fedprox | 0.40 | 4.0 / 1.0 | n/a |" in text
    assert "no test: a seed spends the budget before its first evaluated round" in text
    result = report_json(report)["at_equal_bytes"]
    assert {(a["label"], a["traffic"]) for a in result} == {
        (arm, t) for arm in ("fedpnu", "fedprox") for t in TRAFFIC
    }
    assert next(a for a in result if a["label"] == "fedpnu")["paired"]["p_holm"] == pnu.paired.p_holm


def test_the_bytes_figure_puts_each_arm_at_the_megabytes_it_sent(uploads: Path) -> None:
    report = analysed(uploads)
    fig = bytes_figure(report.curves, TRAFFIC_KEYS)
    up, both = fig.axes
    lines = {line.get_label(): line for line in up.get_lines()}
    assert list(lines["FedPNU"].get_xdata()) == pytest.approx([3.0, 6.0])  # evaluated rounds 2 and 4
    assert list(lines["FedAvg"].get_xdata()) == pytest.approx([4.0, 8.0])
    assert list(lines["FedAvg"].get_ydata()) == pytest.approx([40.0, 81.0])  # mean over seeds, in %
    assert list({ln.get_label(): ln for ln in both.get_lines()}["FedPNU"].get_xdata()) == pytest.approx(
        [7.0, 14.0]
    )
    assert "upload + download" in both.get_xlabel()
    plt.close(fig)
