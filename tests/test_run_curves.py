"""Run curves: written without touching the caller's matplotlib backend."""

from __future__ import annotations


def test_writing_curves_leaves_the_matplotlib_backend_alone(tmp_path):
    import subprocess
    import sys

    # A fresh interpreter: pytest plugins may already have chosen a backend here.
    code = (
        "import matplotlib; matplotlib.use('svg'); from pathlib import Path; "
        "from rlid.runs.summary import write_curves; "
        "rows = [{'iteration': i, 'return': float(i), 'budget': {'env_steps': 4 * i}} "
        "for i in (1, 2)]; "
        f"p = write_curves(Path({str(tmp_path)!r}), rows); "
        "assert p.read_bytes()[:4] == b'\\x89PNG', p; print(matplotlib.get_backend())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "svg"
