"""scripts/bootstrap.sh (behind `make demo` and `make test`) shows progress while it installs.

Run against stand-ins for Python, pip and the system tools, so it takes a few
seconds and no network: the fake pip prints a package every 0.4 s, and each
one must reach bootstrap's output while pip is still running.
"""

from __future__ import annotations

import shutil
import stat
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FAKE_PYTHON = """#!/bin/bash
# "python3.13 -m venv DIR": a virtualenv whose pip and python are stand-ins too.
[ "$1 $2" = "-m venv" ] || exit 2
mkdir -p "$3/bin"
cp "$(dirname "$0")/fake-pip" "$3/bin/pip"
printf '#!/bin/bash\\nexit 0\\n' > "$3/bin/python"
chmod +x "$3/bin/pip" "$3/bin/python"
"""

FAKE_PIP = """#!/bin/bash
case " $* " in *" --upgrade pip "*) exit 0;; esac
for name in django croniter django-admin-rangefilter asgiref sqlparse; do
  echo "Collecting $name"
  echo "  Downloading $name-1.0-py3-none-any.whl (100 kB)"
  sleep 0.4
done
echo "Obtaining file:///src/kathikon"
echo "Installing collected packages: sqlparse, asgiref, django, croniter"
echo "Successfully installed asgiref-1.0 croniter-1.0 django-1.0 sqlparse-1.0"
"""


def executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_bootstrap_streams_progress_while_pip_installs(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "bootstrap.sh", project / "scripts" / "bootstrap.sh")
    shutil.copy(ROOT / "pyproject.toml", project / "pyproject.toml")
    tools = tmp_path / "bin"
    tools.mkdir()
    executable(tools / "python3.13", FAKE_PYTHON)
    executable(tools / "fake-pip", FAKE_PIP)
    executable(tools / "pkg-config", "#!/bin/bash\nexit 0\n")  # the MariaDB headers "exist"
    executable(tools / "id", "#!/bin/bash\necho 1000\n")  # not root: never apt-get
    env = {"PATH": f"{tools}:/usr/bin:/bin", "HOME": str(tmp_path)}  # no pyenv on PATH

    started = time.monotonic()
    process = subprocess.Popen(["bash", "scripts/bootstrap.sh", "primary"], cwd=project,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, bufsize=1)
    assert process.stdout is not None
    lines = [(time.monotonic() - started, line.rstrip("\n")) for line in process.stdout]
    assert process.wait(30) == 0, lines
    text = [line for _, line in lines]

    assert any("creating .venv" in line and "about a minute" in line for line in text), text
    steps = [line for line in text if line.startswith("bootstrap: [")]
    assert [step[:len("bootstrap: [1/3]")] for step in steps] == [
        "bootstrap: [1/3]", "bootstrap: [2/3]", "bootstrap: [3/3]"]
    packages = [(at, line) for at, line in lines if line.startswith("  - ")]
    assert [line for _, line in packages][:5] == [
        "  - django", "  - croniter", "  - django-admin-rangefilter", "  - asgiref", "  - sqlparse"]
    # Streamed as pip prints them, not all at once when it exits: the first package
    # shows up well before the last (pip sleeps 0.4 s after each).
    assert packages[4][0] - packages[0][0] > 1.0, lines
    assert text[-1] == "bootstrap: .venv is ready"
    assert (project / ".venv" / ".kathikon-stamp").exists()

    # A second run finds the stamp current and installs nothing.
    again = subprocess.run(["bash", "scripts/bootstrap.sh", "primary"], cwd=project, env=env,
                           capture_output=True, text=True, timeout=30)
    assert again.returncode == 0 and "[3/3]" not in again.stdout

