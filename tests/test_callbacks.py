"""The composer's callbacks: heard in order, the screen told of each stage, and the round's
end reaching the report and the bank only through them (``optimize`` calls neither)."""

import ast
from pathlib import Path

from infrarsi.callbacks import Callback, CallbackList, RoundEnd, Screen
from infrarsi.events import StageStarted
from infrarsi.stages import Stage

SRC = Path(__file__).resolve().parent.parent / "src" / "infrarsi"


class _Heard(Callback):
    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    def on_stage_start(self, started: StageStarted) -> None:
        self.log.append((self.name, "stage", started.stage))

    def on_round_end(self, end: RoundEnd) -> None:
        self.log.append((self.name, "end", end.round))


def test_a_callback_list_tells_each_callback_in_the_order_given():
    log: list = []
    hear = CallbackList([_Heard("report", log), _Heard("bank", log)])
    hear.on_stage_start(StageStarted(stage=Stage.APPLY, round=2))
    hear.on_round_end(RoundEnd(round=2, run_dir=Path("."), run_id="r"))
    assert log == [
        ("report", "stage", Stage.APPLY),
        ("bank", "stage", Stage.APPLY),
        ("report", "end", 2),
        ("bank", "end", 2),
    ]


def test_a_hook_a_callback_leaves_alone_does_nothing():
    CallbackList([Callback()]).on_round_end(RoundEnd(round=1, run_dir=Path("."), run_id="r"))


def test_the_screen_hears_each_stage_start_as_its_event():
    events: list = []
    started = StageStarted(stage=Stage.RUN, round=1, budget_trials=5)
    Screen(events.append).on_stage_start(started)
    assert events == [started]


def _called_names(path: Path) -> set[str]:
    calls = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            calls.add(func.id if isinstance(func, ast.Name) else getattr(func, "attr", ""))
    return calls


def test_the_composer_writes_no_report_and_ingests_nothing_itself():
    calls = _called_names(SRC / "optimize.py")
    assert {"ReportWriter", "BankIngester", "CallbackList"} <= calls
    assert not {"write_report", "ingest_run"} & calls
