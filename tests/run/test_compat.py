"""Patches that do not apply together are found before any trial and never proposed together."""

import shutil
from pathlib import Path

from infrarsi.run.compat import incompatible_pairs
from infrarsi.workloads import load_manifest

TOY = Path(__file__).resolve().parents[1] / "fixtures" / "toy"


def _diff(old_line: str, new_line: str) -> str:
    """A unified diff of toy.py with three lines of context, one line replaced."""
    import difflib

    lines = (TOY / "toy.py").read_text().splitlines(keepends=True)
    new = [new_line + "\n" if line.rstrip("\n") == old_line else line for line in lines]
    return "".join(difflib.unified_diff(lines, new, "a/toy.py", "b/toy.py"))


OPT = "opt = torch.optim.SGD(model.parameters(), lr=0.1)"


def test_two_patches_of_the_same_line_clash_and_a_third_does_not(tmp_path):
    root = tmp_path / "toy"
    shutil.copytree(TOY, root)
    (root / "patches").mkdir()
    (root / "patches" / "a.diff").write_text(_diff(OPT, OPT[:-1] + ", momentum=0.0)"))
    (root / "patches" / "b.diff").write_text(_diff(OPT, OPT[:-1] + ", dampening=0.0)"))
    (root / "patches" / "c.diff").write_text(
        _diff(
            'parser.add_argument("--steps", type=int, default=4)',
            'parser.add_argument("--steps", type=int, default=4)  # steps',
        )
    )
    text = (root / "workload.yaml").read_text()
    text = text.replace(
        "\nfiles:",
        "\npatches:\n"
        + "".join(
            f"  - {{id: {p}, file: patches/{p}.diff, title: {p}, category: kernel,\n"
            f"     prior: {{step_time_ratio: 1.0, peak_mem_ratio: 1.0}}}}\n"
            for p in "abc"
        )
        + "files:",
        1,
    )
    (root / "workload.yaml").write_text(text)
    manifest = load_manifest(root)
    assert incompatible_pairs(manifest) == {frozenset("ab")}
