"""The contract is frozen: hashed, refused when edited, and checked against the locked files."""

import shutil

import pytest
import yaml
from conftest import INSTRUCTION_EN as EN
from conftest import INSTRUCTION_JA as JA
from conftest import INSTRUCTION_ZH as ZH

from infrarsi.init import ContractError, load_contract, make_contract, read_instruction
from infrarsi.init.build import workload_files
from infrarsi.workloads import load_manifest


def _contract(manifest, text):
    return make_contract(manifest, "tiny", text, read_instruction(text, workload_files(manifest)))


def test_english_chinese_and_japanese_give_the_same_contract(dense):
    en, zh, ja = _contract(dense, EN), _contract(dense, ZH), _contract(dense, JA)
    skip = {"instruction", "contract_hash"}
    assert en.model_dump(exclude=skip) == zh.model_dump(exclude=skip)
    assert en.model_dump(exclude=skip) == ja.model_dump(exclude=skip)
    assert en.correctness.loss_tolerance == 0.005 and en.mem_cap_bytes == 2 * 2**30
    assert en.budget.trials == 20 and {"data.py", "train.py"} <= set(en.locked)


def test_invariants_come_from_the_baseline(dense):
    c = _contract(dense, "make it fast")
    assert c.invariants.tokens_per_step == 8 * 64 and c.invariants.steps == 8
    assert c.invariants.seeds == {"seed": 1234} and len(c.invariants.data_fingerprint) == 64


def test_locking_the_model_removes_it_from_the_editable_set(dense):
    c = _contract(dense, "don't touch the model")
    assert "model.py" in c.locked and c.editable == []


def test_saved_contract_round_trips_and_an_edit_is_refused(dense, tmp_path):
    c = _contract(dense, EN)
    c.save(tmp_path / "c.yaml")
    assert load_contract(tmp_path / "c.yaml") == c
    data = yaml.safe_load((tmp_path / "c.yaml").read_text())
    data["correctness"]["loss_tolerance"] = 0.5
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ContractError, match="edited after init"):
        load_contract(tmp_path / "c.yaml")


def test_a_changed_locked_file_is_refused(dense, tmp_path):
    c = _contract(dense, EN)
    root = tmp_path / "w"
    shutil.copytree(dense.root, root)
    c.check_locked(root)
    (root / "data.py").write_text("# changed\n")
    with pytest.raises(ContractError, match="data.py"):
        c.check_locked(root)
    assert load_manifest(root).name == "dense-1node"


def test_the_noise_policys_headroom_is_sealed_and_an_older_contract_keeps_its_hash(dense, tmp_path):
    import hashlib
    import json

    c = _contract(dense, EN)
    older = c.model_dump(mode="json", exclude={"contract_hash"})
    for name in ("max_gain", "timed_steps", "e2e_sd_s", "start_sd_s", "warmup_sd_s"):
        older["noise"].pop(name)  # as a contract sealed before the fields were written
    assert c.contract_hash == hashlib.sha256(json.dumps(older, sort_keys=True).encode()).hexdigest()
    bounded = c.model_copy(
        update={"noise": c.noise.model_copy(update={"max_gain": 1.08, "timed_steps": 300})}
    )
    assert bounded.sealed().contract_hash != c.contract_hash  # the bound is part of the seal
    bounded.sealed().save(tmp_path / "c.yaml")
    assert load_contract(tmp_path / "c.yaml").noise.max_gain == 1.08
    assert load_contract(tmp_path / "c.yaml").noise.timed_steps == 300


def test_a_contract_with_an_unknown_field_is_refused_in_our_words(dense, tmp_path):
    c = _contract(dense, EN)
    data = c.model_dump(mode="json")
    data["speedup_claimed"] = 9.9
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ContractError) as refused:
        load_contract(tmp_path / "c.yaml")
    text = str(refused.value)
    assert "field 'speedup_claimed': unknown field: remove it" in text
    assert "pydantic" not in text and "http" not in text and "infrarsi init" in text


def test_an_empty_instruction_is_refused_not_frozen_as_a_default(dense):
    from infrarsi.init import InitError, init

    with pytest.raises(InitError, match="the instruction is empty"):
        init(dense, "tiny", "   ")
