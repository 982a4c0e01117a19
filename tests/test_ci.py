"""The CI script's pytest line names every pytest plugin the test extras bring in.

``.ci/run`` turns entry-point autoloading off (see the comment there), so a
plugin it does not name is silently absent in CI: its fixtures and markers
would vanish from the one run that gates a change.
"""

from __future__ import annotations

import re
from importlib.metadata import entry_points
from pathlib import Path

CI = Path(__file__).resolve().parents[1] / ".ci" / "run"

# Installed by the extras but not wanted: xdist's --looponfail mode (interactive) and
# platformdirs' fixtures (no test uses them).
NOT_NEEDED = {"xdist.looponfail", "platformdirs.pytest_plugin"}


def named_plugins() -> set[str]:
    text = CI.read_text()
    block = re.search(r"^plugins=\((.*?)\)", text, re.S | re.M)
    assert block, "no plugins=(...) list in .ci/run"
    return set(re.findall(r"-p\s+(\S+)", block.group(1)))


def test_ci_names_every_installed_pytest_plugin() -> None:
    installed = {ep.value for ep in entry_points(group="pytest11")}
    named = named_plugins()
    assert installed - NOT_NEEDED <= named, sorted(installed - NOT_NEEDED - named)
    assert named <= installed, sorted(named - installed)  # a stale name fails at start anyway


def test_ci_turns_autoloading_off_for_each_run_that_names_them() -> None:
    # The background collection that warms the cache, the agents at @latest and the test
    # run itself.
    commands = CI.read_text().replace("\\\n", " ").splitlines()
    runs = [c for c in commands if 'pytest "${plugins[@]}"' in c]
    assert len(runs) == 3, runs
    for run in runs:
        head = run.split(".venv/bin/python -m pytest")[0]
        assert "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 " in head, run
