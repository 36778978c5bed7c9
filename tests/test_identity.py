"""One rule for "is this the same configuration?", used by every stage, searcher and bench."""

from infrarsi.identity import canonical_value, config_key, same_config
from infrarsi.run.problem import Problem, distance
from infrarsi.run.space import Config, Space


def test_values_spelled_differently_are_one_value():
    assert {canonical_value(v) for v in (2, 2.0, "2", "2.0")} == {"2"}
    assert {canonical_value(v) for v in (True, "true", "True")} == {"true"}
    assert {canonical_value(v) for v in (False, "false", "FALSE")} == {"false"}
    assert canonical_value(0.5) == canonical_value("0.5") != canonical_value(0.25)
    assert canonical_value("bf16") == "bf16"
    assert canonical_value(1) != canonical_value(True)  # an int knob is not a flag


def test_a_config_is_its_knob_values_and_its_patch_set():
    a = config_key({"micro_batch": 2, "compile": "off"}, ["b", "a"])
    b = config_key({"compile": "off", "micro_batch": 2.0}, ["a", "b", "a"])
    assert a == b
    assert a != config_key({"micro_batch": 4, "compile": "off"}, ["a", "b"])
    assert a != config_key({"micro_batch": 2, "compile": "off"}, ["a"])
    assert same_config(({"x": "1"}, []), ({"x": 1.0}, ()))


def test_over_a_spaces_dimensions_a_knob_it_does_not_vary_is_not_part_of_the_identity():
    spelled = {"micro_batch": 2, "k_compile": "off"}
    left_out = {"micro_batch": 2}
    assert config_key(spelled) != config_key(left_out)
    assert config_key(spelled, dims=["micro_batch"]) == config_key(left_out, dims=["micro_batch"])


def test_configs_compare_and_hash_by_their_identity():
    a, b = Config.of({"mb": 2, "ckpt": True}), Config.of({"mb": 2.0, "ckpt": "true"})
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != Config.of({"mb": 2, "ckpt": False})
    assert distance(a, b) == 0 and distance(a, Config.of({"mb": 4, "ckpt": True})) == 1


def test_a_proposal_over_the_varying_knobs_finds_the_candidate_that_spells_a_constant_one():
    """The peers' bug: a table's constant column kept in the candidates, dropped from the
    space their samplers propose over, so no proposal matched a candidate."""
    candidates = [Config.of({"mb": m, "k_compile": "off"}) for m in (1, 2, 4)]
    space = Space.from_levels({"mb": [1, 2, 4]}, [])
    problem = Problem(candidates, space, candidates[0])
    proposal = Config.of({"mb": 2.0})  # the sampler's value, as a float
    assert problem.by_free_key()[problem.free_key(proposal)] == candidates[1]


def test_one_trial_status_enum_says_whether_a_trial_is_finished_and_ok():
    import pytest

    from infrarsi.records.trial import TrialStatus
    from infrarsi.run.problem import Outcome

    assert not TrialStatus.RUNNING.is_finished() and not TrialStatus.INTERRUPTED.is_finished()
    assert TrialStatus.OK.is_ok() and not TrialStatus.SLOW.is_ok()
    assert {s for s in TrialStatus if s.is_failure()} == {
        TrialStatus.OOM,
        TrialStatus.TIMEOUT,
        TrialStatus.CRASH,
        TrialStatus.INVALID,
    }
    assert Outcome("oom").status is TrialStatus.OOM  # told by value, held as the enum
    with pytest.raises(ValueError, match="one of"):
        Outcome("running")


def test_a_record_that_travelled_from_a_node_has_its_file_paths_moved_not_its_text():
    from infrarsi.records.trial import Evaluation, TrialRecord

    node = "/tmp/node-7/trials"
    record = TrialRecord(
        trial_id="t1",
        workload="toy",
        scale="tiny",
        status="crash",
        knobs={},
        patches=[],
        locked_files={},
        mem_cap_bytes=None,
        timeout_s=60.0,
        started_unix_s=0.0,
        cost_s=1.0,
        error=f"Traceback: {node}/t1/train.py line 3",
        commands=[["python", f"{node}/t1/workspace/train.py"]],
        trial_dir=f"{node}/t1",
        evaluation=Evaluation(final_weights=f"{node}/t1/final.pt", initial_weights="/elsewhere"),
    )
    landed = record.moved(node, "/home/me/run/trials")
    assert landed.trial_dir == "/home/me/run/trials/t1"
    assert landed.evaluation.final_weights == "/home/me/run/trials/t1/final.pt"
    assert landed.evaluation.initial_weights == "/elsewhere"
    assert landed.commands == record.commands and landed.error == record.error


def test_a_stored_record_written_by_a_newer_version_is_refused_with_the_fix(tmp_path):
    import pytest

    from infrarsi.records import ApplyResult, BankAdvice

    with pytest.raises(ValueError, match="upgrade InfraRSI"):
        BankAdvice(
            schema_version=99, bank_url="sqlite://", hardware={}, workload={}, experiences=0, used=0
        )
    (tmp_path / "apply.json").write_text('{"schema_version": 99}')
    with pytest.raises(ValueError, match="upgrade InfraRSI"):
        ApplyResult.load(tmp_path)


def test_one_configuration_type_on_the_ground_floor():
    from infrarsi.identity import Configuration

    a = Configuration.of({"micro_batch": 2, "precision": "bf16"}, ["sdpa_attention"])
    b = Configuration.of({"precision": "bf16", "micro_batch": "2.0"}, {"sdpa_attention"})
    assert a == b and hash(a) == hash(b) and Config is Configuration
    assert a.same_knobs(Configuration.of({"micro_batch": 2.0, "precision": "bf16"}))
    assert a.changed_from({"micro_batch": 2.0, "precision": "fp32"}) == {"precision": "bf16"}
    assert a.describe() == "micro_batch=2 precision=bf16 +sdpa_attention"
    base = Configuration.of({"micro_batch": 2.0, "precision": "fp32"})
    assert a.describe_from(base) == "precision=bf16 +sdpa_attention"
    assert base.describe_from(Configuration.of({"precision": "fp32", "micro_batch": 2})) == (
        "baseline"
    )


def test_records_hand_out_the_configuration_they_name():
    from infrarsi.identity import Configuration
    from infrarsi.records import CandidateResult
    from infrarsi.records.bank import BankSeed

    fields = {"knobs": {"micro_batch": 4.0}, "patches": ["fused_qkv", "sdpa_attention"]}
    candidate = CandidateResult.model_validate({"label": "c1", **fields})
    seed = BankSeed.model_validate(
        {
            "knobs": {"micro_batch": "4"},
            "patches": ["sdpa_attention", "fused_qkv"],
            "expected_speedup": 1.2,
            "similarity": 0.9,
            "experiences": 3,
            "sources": [],
        }
    )
    want = Configuration.of({"micro_batch": 4}, {"sdpa_attention", "fused_qkv"})
    assert candidate.configuration == seed.configuration == want
    assert len({candidate.configuration, seed.configuration, want}) == 1


def test_knobs_that_differ_however_spelled_and_the_kinds_of_change_they_make():
    from infrarsi.identity import differing_knobs
    from infrarsi.workloads import find
    from infrarsi.workloads.knobs import baseline, change_kinds

    assert differing_knobs({"a": 2, "b": "true"}, {"a": "2.0", "b": True}) == set()
    assert differing_knobs({"a": 2}, {"a": 2, "b": 1}) == {"b"}  # set on one side only
    assert differing_knobs({"a": 2, "b": 1}, {"a": 3, "b": 2}, ["a"]) == {"a"}
    dense = find("dense-1node")
    base = baseline(dense, "tiny")
    # the same assignment as a JSON text or a command line spells it: no kind of change (the
    # raw != called it another split, and verification took that kind's looser floors)
    spelled = {k: str(v) if not isinstance(v, bool) else str(v).lower() for k, v in base.items()}
    assert change_kinds(dense, base, spelled) == frozenset()
    halved = {**base, "micro_batch": base["micro_batch"] / 2, "grad_accum": base["grad_accum"] * 2}
    assert change_kinds(dense, base, halved) == {"split"}
    assert change_kinds(dense, base, {**base, "precision": "bf16"}) == {"precision"}
