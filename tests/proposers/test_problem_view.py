"""A proposed patch as the search sees it: a candidate whose id is its path in the run
directory, its expectation as the prior, tried on the baseline's knobs first."""

import math

from chat_server import catalog_diff

from infrarsi.proposal import Expectation, ProposalLine, ProposedPatch, Recorded, append_line
from infrarsi.run.problem_build import build_problem, with_proposed
from infrarsi.workloads import find

PATCH = "proposals/llm-0123456789ab.diff"


def _proposed(tmp_path):
    (tmp_path / "proposals").mkdir()
    (tmp_path / PATCH).write_text(catalog_diff("fused_qkv"))
    return ProposedPatch(
        patch_id=PATCH,
        diff_sha256="x" * 64,
        proposed_by="llm:m",
        expectation=Expectation(step_time_ratio=0.5, peak_mem_ratio=0.9),
    )


def test_a_proposed_patch_joins_the_candidates_and_is_tried_first(tmp_path):
    manifest = find("dense-1node")
    view = with_proposed(manifest, [_proposed(tmp_path)], tmp_path)
    problem = build_problem(view, "tiny", None, first=(frozenset([PATCH]),))
    assert PATCH in problem.space.patches and "fused_adamw" in problem.space.patches
    start = problem.start_points()
    assert start[0] == problem.baseline and start[1].patches == frozenset([PATCH])
    assert start[1].knobs == problem.baseline.knobs
    assert math.isclose(problem.patch_log_speed[PATCH], math.log(0.5))
    assert view.patch_path(PATCH) == (tmp_path / PATCH).resolve()


def test_without_the_catalog_only_proposed_patches_are_searched(tmp_path):
    view = with_proposed(find("dense-1node"), [_proposed(tmp_path)], tmp_path, catalog=False)
    problem = build_problem(view, "tiny", None)
    assert problem.space.patches == [PATCH]
    assert all(c.patches <= {PATCH} for c in problem.candidates)


def test_a_resumed_run_keeps_the_patches_its_proposer_accepted(tmp_path):
    append_line(tmp_path, ProposalLine(n=1, status="rejected", stage="files", reason="locked"))
    append_line(
        tmp_path,
        ProposalLine(
            n=2,
            status="accepted",
            stage="smoke",
            reason="ok",
            diff_sha256="y" * 64,
            model="m",
            patch_id=PATCH,
            expectation=Expectation(step_time_ratio=0.9),
        ),
    )
    recorded = Recorded(tmp_path)
    assert [p.patch_id for p in recorded.accepted()] == [PATCH]
    assert recorded.accepted()[0].proposed_by == "llm:m" and not recorded.wants_more()
    assert recorded.searches_catalog
