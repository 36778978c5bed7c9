"""What the Ray executor ships to a node: a workload named by path travels whole, with its
links resolved (a link into another workload would point nowhere there), and its diff files."""

import io
import tarfile
from pathlib import Path

from infrarsi.executors import TrialRequest
from infrarsi.executors.ray_node import bundle_of as _bundle

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_a_workload_by_path_travels_with_its_links_resolved_and_its_diffs(tmp_path):
    diff = tmp_path / "mine.diff"
    diff.write_text("--- a/toy.py\n+++ b/toy.py\n")
    request = TrialRequest(
        workload=str(FIXTURES / "toy-stdout" / "workload.yaml"),
        scale="tiny",
        knobs={},
        patches=[str(diff), "catalog_id"],
        workdir=str(tmp_path / "trials"),
    )
    shipped, bundle = _bundle(request, tmp_path)
    assert (FIXTURES / "toy-stdout" / "toy.py").is_symlink()
    with tarfile.open(fileobj=io.BytesIO(bundle)) as archive:
        members = {m.name: m for m in archive.getmembers()}
    assert members["workload/toy.py"].isfile() and "workload/workload.yaml" in members
    assert shipped.workload == "workload/workload.yaml" and shipped.workdir == "trials"
    assert shipped.patches == ["patches/0-mine.diff", "catalog_id"]
    assert members["patches/0-mine.diff"].isfile()
