"""The sandbox a trial's processes run in, below every room that launches one (the trial, the
manifest drafter's dry run, the evaluation server): their launch and end (``process``), who
owns them (``ownership``: namespaces or a subreaper), their memory (``memcg``), launchers on
other hosts (``remote``), and the hooks a rank or the init runs (``_hooks``). It knows no
workload, trial record or stage."""

from pathlib import Path

HOOKS_DIR = Path(__file__).resolve().parent / "_hooks"
