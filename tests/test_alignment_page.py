"""docs/alignment.md's readings, computed from planted cells: what (a) and (b) may and may not say."""

from __future__ import annotations

from scripts import alignment_page as page

ARMS = ("plain", "shared-0.4", "independent-0.4", "diff-init")


def planted(p: dict[str, list[float]], seeds: int = 10) -> dict:
    """A regime whose arm `a` has P = p[a][seed] (other figures 0)."""
    cells = {}
    for seed in range(seeds):
        cells[str(seed)] = {
            arm: {**dict.fromkeys(page.KEPT, 0.0), "permutation_loss": p[arm][seed % len(p[arm])]} for arm in ARMS
        }
    return {"config": {}, "seeds": cells}


MOVING = {"plain": [0.1, 0.12, 0.08, 0.11], "shared-0.4": [0.0, 0.01, 0.0, 0.002],
          "independent-0.4": [0.02, 0.03, 0.015, 0.02], "diff-init": [1.1, 1.2, 1.0, 1.15]}  # fmt: skip


def test_a_regime_with_misalignment_passes_a_and_b_resolves_lower() -> None:
    cells = {"mlp-same-init": planted(MOVING)}
    _, found, said = page.question_a(cells)
    assert found == ["mlp-same-init"] and "P(plain) > 0: the interval excludes 0" in said[0]
    primary, waiting = page.b_comparisons(cells, found, "permutation_loss")
    assert waiting == [] and [p.label.split(": ")[1] for p in primary] == [
        "shared-0.4 − independent-0.4", "shared-0.4 − plain"]  # fmt: skip
    assert all(p.mean < 0 and p.p_holm is not None and p.p_holm < 0.05 for p in primary)
    assert "across the 2 comparisons tested" in page.question_b(cells, found)[0]


def test_no_misalignment_is_not_read_as_misalignment() -> None:
    flat = {**MOVING, "plain": [0.01, -0.01, 0.0, 0.005]}
    _, found, said = page.question_a({"r": planted(flat)})
    assert found == [] and "not shown: the interval excludes P(plain) above" in said[0]
    assert page.question_b({"r": planted(flat)}, found) == ["No regime passed (a), so (b) has nothing to test here."]


def test_a_regime_whose_positive_control_did_not_move_is_void() -> None:
    dead = {**MOVING, "diff-init": [0.01, -0.01, 0.0, 0.005]}
    _, found, said = page.question_a({"r": planted(dead)})
    assert found == [] and "void: the positive control" in said[0]


def test_too_few_seeds_wait_instead_of_answering() -> None:
    cells = {"r": planted(MOVING, seeds=6)}
    _, found, _ = page.question_a(cells)
    primary, waiting = page.b_comparisons(cells, found, "permutation_loss")
    assert found == ["r"] and primary == [] and waiting == ["r (6 of 10 seeds)"]
    _, _, said = page.question_a({"r": planted(MOVING, seeds=3)})
    assert "not yet read: 3 of the 5 seeds" in said[0]


def test_the_page_says_when_its_cells_come_from_more_than_one_machine() -> None:
    from fedpfn.core.provenance import collect

    here = collect()
    there = {**here, "device": {**here["device"], "cpu": "Another CPU"}}
    one = {"r": {**planted(MOVING), "provenance": {"seed0": here, "seed1": here}}}
    assert page.machines(one) == "Every cell ran on one machine with one set of libraries."
    two = {"r": {**planted(MOVING), "provenance": {"seed0": here, "seed1": there}}}
    assert page.machines(two).startswith("The results on this page come from 2 machines")
    kept_before = {"r": planted(MOVING)}  # cells.json written before cells recorded a provenance
    assert "machine not recorded" in page.machines(kept_before)


def test_the_committed_page_is_what_its_stored_cells_write() -> None:
    """`alignment_page.py --stored` writes docs/alignment.md again, byte for byte."""
    assert page.write_page(page.stored_cells()) == page.PAGE.read_text()
