"""A manifest is written by hand: every bad field must be named in the error."""

import shutil

import pytest
import yaml

from infrarsi.workloads import ManifestError, all_reference, load_manifest, reference_names


@pytest.fixture()
def manifest_copy(tmp_path, dense):
    """A writable copy of dense-1node, and a function that edits its YAML."""
    root = tmp_path / "w"
    shutil.copytree(dense.root, root)

    def edit(change):
        data = yaml.safe_load((root / "workload.yaml").read_text())
        change(data)
        (root / "workload.yaml").write_text(yaml.safe_dump(data))
        return root

    return edit


def test_reference_workloads_validate():
    assert "dense-1node" in reference_names()
    for manifest in all_reference():
        assert len(manifest.patches) >= 4
        assert {"tiny", "cpu", "gpu"} <= set(manifest.scales)


def _expect(edit, change, *fragments):
    with pytest.raises(ManifestError) as info:
        load_manifest(edit(change))
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)


def test_bad_knob_type_names_the_field(manifest_copy):
    def change(d):
        d["knobs"][4]["type"] = "string"

    _expect(manifest_copy, change, "field 'knobs.4.type'")


def test_default_outside_values_names_the_knob(manifest_copy):
    def change(d):
        d["knobs"][2]["default"] = 3

    _expect(manifest_copy, change, "knobs.2", "micro_batch", "default 3 is not in values")


def test_missing_field_says_to_add_it(manifest_copy):
    def change(d):
        del d["invariants"]

    _expect(manifest_copy, change, "field 'invariants'", "required field is missing")


def test_misspelled_field_is_unknown(manifest_copy):
    def change(d):
        d["knobz"] = d.pop("knobs")

    _expect(manifest_copy, change, "field 'knobz'", "unknown field")


def test_unknown_placeholder_in_command(manifest_copy):
    def change(d):
        d["launch"]["command"].append("--foo={fooo}")

    _expect(manifest_copy, change, "launch.command", "unknown placeholder {fooo}")


def test_constraint_with_unknown_name(manifest_copy):
    def change(d):
        d["constraints"][0]["expr"] = "micro_batchh > 0"

    _expect(manifest_copy, change, "constraints[0].expr", "micro_batchh")


def test_constraint_with_a_call_is_refused(manifest_copy):
    def change(d):
        d["constraints"][0]["expr"] = "__import__('os')"

    _expect(manifest_copy, change, "constraints.0.expr", "not allowed")


def test_missing_patch_file(manifest_copy):
    def change(d):
        d["patches"][1]["file"] = "patches/nope.diff"

    _expect(manifest_copy, change, "patches.1.file", "does not exist")


def test_unknown_conflict_id(manifest_copy):
    def change(d):
        d["patches"][0]["conflicts"] = ["nope"]

    _expect(manifest_copy, change, "patches[0].conflicts", "nope")


def test_not_yaml(tmp_path):
    (tmp_path / "workload.yaml").write_text("name: [unclosed")
    with pytest.raises(ManifestError, match="not valid YAML"):
        load_manifest(tmp_path)
