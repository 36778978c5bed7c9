"""The search-variant study (``bench/search_variants.py``): a variant sets the searcher's
constants and the next job starts from the committed ones; a variant it cannot read is refused
by name; one small study runs end to end on a committed table."""

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import search_variants as study  # noqa: E402

import infrarsi.run.infrarsi_searcher as search  # noqa: E402


def test_a_variant_sets_its_constants_and_the_next_starts_from_the_committed_ones():
    committed = dict(study.COMMITTED)
    assert study.apply_variant("nseeds:1+tr:1+drop:0.5") == "infrarsi"
    assert (search.N_SEEDS, study.trust.TRUST_RADIUS) == (1, 1)
    assert study.prior_fade.PRIOR_DROP_EVIDENCE == 0.5
    assert isinstance(search.N_SEEDS, int)
    assert study.apply_variant("local:0+restarts:2+ablate:with-pairing") == (
        "infrarsi-with-pairing"
    )
    assert search.LOCAL is False and study.steptime.GP_RESTARTS == 2
    assert study.apply_variant("greedy") == "greedy"
    assert {name: getattr(*study._owner(name)) for name in committed} == committed


@pytest.mark.parametrize("bad", ["nseed:1", "tr", "tr:"])
def test_a_variant_it_cannot_read_is_refused_by_name(bad):
    with pytest.raises(SystemExit, match="variant"):
        study.apply_variant(bad)
    study.apply_variant("base")


def test_a_small_study_scores_every_variant_on_a_table(tmp_path):
    table = BENCH / "data" / "moe-1node-full-fb737a3983921667.csv"
    out = tmp_path / "study.json"
    assert (
        study.main(
            [
                "--variants",
                "base,greedy",
                "--table",
                str(table),
                "--seeds",
                "1",
                "--jobs",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    (row,) = result["area_mean"].values()
    assert set(row) == {"base", "greedy"} and all(0 <= a <= 2 for a in row.values())
    assert set(result["average_rank"]) == {"base", "greedy"}
