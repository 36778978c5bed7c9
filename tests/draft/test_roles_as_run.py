"""Roles read from what a run did (``draft/observed.py``): an argument whose value the run
showed as the batch, the backward calls of a step or the thread count is only a candidate; a
second run with it changed decides. And the draft's choice of where a trial's steps come from
(``assemble.observed_steps``): the optimizer as the observer saw it, or why not."""

import pytest

from infrarsi.draft.arguments import ScriptArg
from infrarsi.draft.assemble import observed_steps
from infrarsi.draft.observed import Candidate, candidates, followed, shown


def _arg(dest: str, kind: str = "int") -> ScriptArg:
    return ScriptArg(dest, (f"--{dest.replace('_', '-')}",), kind)


def _run(args: dict, batch: list[int], backwards: int, threads: int | None = None) -> list[dict]:
    records: list[dict] = [{"kind": "args", "values": args}]
    records += [{"kind": "seen", "what": "dataloader.batch_size", "value": b} for b in batch]
    if threads is not None:
        records.append({"kind": "seen", "what": "set_num_threads", "value": threads})
    records += [{"kind": "step", "step": i, "loss": 1.0, "backwards": backwards} for i in range(4)]
    return records


ARGS = [_arg("rows"), _arg("chunks"), _arg("width"), _arg("intra"), _arg("rate", "float")]


def test_a_value_the_run_showed_is_a_candidate_with_a_value_of_its_own_to_try():
    run = _run({"rows": 4, "chunks": 3, "width": 4, "intra": 1, "rate": 3.0}, [4], 3, threads=1)
    found = candidates(ARGS, placed=set(), taken=set(), observed=run)
    assert found == [
        Candidate("rows", "micro_batch", 4, 5),
        Candidate("chunks", "grad_accum", 3, 6),  # 4 and 5 are taken by other arguments
        Candidate("width", "micro_batch", 4, 7),  # the same value by chance: the run decides
        Candidate("intra", "threads", 1, 2),
    ]
    assert shown(run)["grad_accum"] == {3}
    # a role already read (by name, use or the user) is not looked for; one backward a step
    # says nothing of an argument that is 1
    rest = candidates(ARGS, {"rows"}, {"micro_batch", "threads"}, run)
    assert [(c.dest, c.role) for c in rest] == [("chunks", "grad_accum")]
    one = _run({"chunks": 1}, [], 1)
    assert candidates(ARGS, set(), set(), one) == []


def test_the_argument_whose_change_the_run_followed_takes_the_role():
    found = [
        Candidate("rows", "micro_batch", 4, 5),
        Candidate("width", "micro_batch", 4, 7),
        Candidate("chunks", "grad_accum", 3, 6),
    ]
    second = _run({"rows": 5, "width": 7, "chunks": 6}, [5], 3)  # the batch followed rows
    confirmed, notes = followed(found, second)
    assert confirmed == {"rows": "micro_batch"}  # chunks did not follow: 3 backward calls
    said = " ".join(notes)
    assert "rows: micro_batch, from the run" in said and "when a second dry run gave it 5" in said
    assert "width: its value 4 was the batch" in said and "it did not follow" in said
    assert "chunks: its value 3 was the backward calls" in said


def test_two_arguments_both_followed_are_neither_taken():
    found = [Candidate("rows", "micro_batch", 4, 5), Candidate("width", "micro_batch", 4, 7)]
    confirmed, notes = followed(found, _run({}, [5, 7], 1))
    assert confirmed == {} and all("another argument's change" in n for n in notes)


@pytest.mark.parametrize(
    "steps, asked, expected",
    [
        ([{"step": i, "loss": 1.0} for i in range(6)], 6, {"observed": "optimizer"}),
        (
            [{"step": i, "loss": 1.0} for i in range(7)],
            6,
            {"observed": "optimizer", "steps_offset": 1},
        ),
        ([], 6, "no torch.optim optimizer was seen stepping"),
        ([{"step": 0, "loss": None}], 1, "optimizer step 0 had no scalar loss reach backward"),
        ([{"step": i, "loss": 1.0} for i in range(3)], 6, "its optimizer stepped 3 times"),
    ],
)
def test_a_trials_steps_come_from_the_optimizer_where_the_observer_saw_each(steps, asked, expected):
    got = observed_steps(steps, asked)
    assert got == expected if isinstance(expected, dict) else expected in got


LIGHTNING = """
import argparse
import lightning as L
p = argparse.ArgumentParser()
p.add_argument("--updates", type=int, default=10)
p.add_argument("--rows", type=int, default=8)
p.add_argument("--agg", type=int, default=2)
p.add_argument("--prec", type=str, default="32-true")
p.add_argument("--gpus", type=int, default=1)
p.add_argument("--rs", type=int, default=3)
a = p.parse_args()
L.seed_everything(a.rs)
loader = torch.utils.data.DataLoader(data, batch_size=a.rows)
trainer = L.Trainer(max_steps=a.updates, accumulate_grad_batches=a.agg, precision=a.prec,
                    devices=a.gpus)
"""


def test_a_lightning_trainers_arguments_are_read_by_where_they_go(tmp_path):
    from infrarsi.draft.command import parse_command
    from infrarsi.draft.draft import arguments_note, plan, read_script

    (tmp_path / "fit.py").write_text(LIGHTNING)
    command = parse_command(["python", "fit.py", "--updates", "40", "--agg", "2"])
    draft = plan(read_script(command, tmp_path), cores=2)
    knobs = {k["name"]: k for k in draft.knobs}
    assert knobs["micro_batch"]["role"] == "micro_batch" and "grad_accum" in knobs
    assert knobs["prec"]["values"] == ["32-true", "bf16-mixed"]
    assert "--updates={steps}" in draft.template and draft.params["steps"] == 40
    assert "--rs={seed}" in draft.template and not draft.stop_after_steps
    said = " ".join(draft.notes)
    assert "gpus: the ranks the script's framework starts itself" in said
    listed = arguments_note(draft)
    assert "--updates: the scale's steps" in listed and "--rs: the scale's seed" in listed
    assert "--prec: knob prec (precision)" in listed and "; --gpus: kept as given (" in listed


def test_a_role_read_without_the_run_that_the_run_contradicts_is_said():
    from infrarsi.draft.observed import unseen

    named = ScriptArg("per_replica_bs", ("--per-replica-bs",), "int", named="micro_batch")
    found = {"micro_batch": named, "grad_accum": _arg("k_accum")}
    run = _run({"per_replica_bs": 4, "k_accum": 2}, [8], 2)
    (said,) = unseen(found, run)
    assert said.startswith("per_replica_bs (micro_batch, named so): its value 4 was not")
    assert said.endswith("(8): check it")
    assert unseen(found, _run({"per_replica_bs": 8, "k_accum": 2}, [8], 2)) == []
