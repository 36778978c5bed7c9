"""Patches are checked before anything runs and applied with git; the catalog composes."""

import itertools
import shutil

import pytest

from infrarsi.trial import PatchRefused, prepare
from infrarsi.trial.patching import PatchFailed, apply, check_paths, diff_paths
from infrarsi.trial.preparation import refuse_patch

TOUCH_TRAIN = """--- a/train.py
+++ b/train.py
@@ -1 +1 @@
-x
+y
"""


def _check(diff, dense):
    return check_paths(diff, dense.root, dense.files.editable, dense.files.locked)


def test_diff_paths_reads_git_and_plain_headers():
    diff = (
        "diff --git a/model.py b/model.py\n--- a/model.py\n+++ b/model.py\n"
        "--- old/x.py\t2024-01-01\n+++ new/x.py\t2024-01-01\n"
        "rename from a.py\nrename to b.py\n"
    )
    paths = diff_paths(diff)
    assert {"model.py", "old/x.py", "new/x.py", "a.py", "b.py"} <= set(paths.paths)
    assert not paths.symlink


def test_catalog_patches_are_allowed(dense):
    for patch in dense.patches:
        assert _check(dense.patch_path(patch.id).read_text(), dense) == []


@pytest.mark.parametrize(
    "diff, reason",
    [
        (TOUCH_TRAIN, "train.py: locked file"),
        (TOUCH_TRAIN.replace("train.py", "data.py"), "data.py: locked file"),
        (TOUCH_TRAIN.replace("train.py", "../outside.py"), "outside the workspace"),
        (
            TOUCH_TRAIN.replace("a/train.py", "/etc/passwd").replace("b/train.py", "/etc/passwd"),
            "outside the workspace",
        ),
        (TOUCH_TRAIN.replace("train.py", "README.md"), "not an editable file"),
        ("diff --git a/model.py b/model.py\nnew mode 120000\n", "creates a symlink"),
        ("just some text\n", "names no file"),
    ],
)
def test_refused_paths(dense, diff, reason):
    reasons = _check(diff, dense)
    assert any(reason in r for r in reasons), reasons


def test_editable_symlink_to_locked_file_is_refused(tmp_path, dense):
    root = tmp_path / "w"
    shutil.copytree(dense.root, root)
    (root / "model.py").unlink()
    (root / "model.py").symlink_to(root / "train.py")
    reasons = check_paths(
        TOUCH_TRAIN.replace("train.py", "model.py"), root, dense.files.editable, dense.files.locked
    )
    assert any("locked file" in r for r in reasons), reasons


def test_patch_touching_train_is_refused_before_anything_runs(tmp_path, dense):
    diff = tmp_path / "evil.diff"
    diff.write_text(TOUCH_TRAIN)
    with pytest.raises(PatchRefused, match="train.py: locked file"):
        refuse_patch(dense, diff)
    with pytest.raises(PatchRefused, match="unknown patch .evil.: give a catalog id"):
        prepare(dense, "tiny", {}, ["evil"])


def test_every_order_of_the_catalog_applies(tmp_path, dense):
    ids = [p.id for p in dense.patches]
    for n in range(1, len(ids) + 1):
        for order in itertools.permutations(ids, n):
            ws = tmp_path / "-".join(order)
            ws.mkdir()
            shutil.copy(dense.root / "model.py", ws / "model.py")
            for patch_id in order:
                apply(dense.patch_path(patch_id), ws)


def test_a_patch_that_does_not_fit_changes_nothing(tmp_path, dense):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "model.py").write_text("something else entirely\n")
    with pytest.raises(PatchFailed, match="does not apply"):
        apply(dense.patch_path("sdpa_attention"), ws)
    assert (ws / "model.py").read_text() == "something else entirely\n"


def test_a_diff_file_given_by_path_is_checked_like_a_catalog_patch(tmp_path, dense):
    evil = tmp_path / "evil.diff"
    evil.write_text(TOUCH_TRAIN)
    with pytest.raises(PatchRefused, match="train.py: locked file"):
        prepare(dense, "tiny", {}, [str(evil)])
    ok = tmp_path / "mine.diff"
    ok.write_text(dense.patch_path("fused_adamw").read_text())
    spec = prepare(dense, "tiny", {}, [str(ok)])
    assert [(p.id, p.catalog) for p in spec.patches] == [("mine.diff", False)]
