"""Install torch into the running interpreter's environment: the CPU build, or the GPU one.

``make install`` (and so ``make demo`` / ``make test``) runs this with the venv's Python
before ``pip install -e ".[test]"``, which then finds torch already there.

* ``--variant cpu`` (the default): from PyTorch's CPU wheel index
  (https://download.pytorch.org/whl/cpu), the ``+cpu`` build, about 200 MB. On Linux,
  PyPI's ``torch`` is the CUDA build, several GB with its ``nvidia-*`` wheels, which a
  CPU does not use. Where that index cannot be reached (no network, a firewall, an
  offline mirror), the default index is used instead, with a note: CI machines and
  mirrors that carry a CPU wheel keep working. Reachability is asked once, with a
  short timeout, so an offline machine does not wait.
* ``--variant gpu``: from the default index (PyPI's Linux wheel is the CUDA build);
  ``--index-url`` picks another, e.g. https://download.pytorch.org/whl/cu128.

Nothing is installed when the interpreter already has the requested version.

    python scripts/install_torch.py                 # CPU build
    python scripts/install_torch.py --variant gpu   # CUDA build
    python scripts/install_torch.py --dry-run       # print the pip command only
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from importlib import metadata

TORCH_VERSION = "2.13.0"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TIMEOUT_S = 5.0


def reachable(url: str, timeout: float = TIMEOUT_S) -> bool:
    """Whether ``url`` answers within ``timeout`` seconds (any HTTP status counts)."""
    try:
        request = urllib.request.Request(url, method="HEAD")
        with urllib.request.urlopen(request, timeout=timeout):  # noqa: S310 (fixed https URL)
            return True
    except urllib.error.HTTPError:
        return True  # it answered
    except (OSError, ValueError):  # URLError, timeouts, refused, no DNS
        return False


def installed_version(package: str = "torch") -> str | None:
    """The installed version of ``package`` in this interpreter, or None."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def satisfied(installed: str | None, version: str, variant: str) -> bool:
    """Whether ``installed`` (e.g. ``2.13.0+cpu``) already is the requested build.

    A CPU request is met by the ``+cpu`` build or a plain one (a mirror's, macOS's,
    Windows'); a GPU request only by a build that is not ``+cpu``.
    """
    if installed is None:
        return False
    public, _, local = installed.partition("+")
    if public != version:
        return False
    return variant == "cpu" or local != "cpu"


def pip_command(
    version: str = TORCH_VERSION,
    *,
    variant: str = "cpu",
    index_url: str | None = None,
    is_reachable: Callable[[str], bool] = reachable,
    python: str = sys.executable,
) -> tuple[list[str], str]:
    """The pip command that installs torch ``version``, and one line saying where from.

    ``index_url``: the index to use (no fallback); ``is_reachable``: the check of
    PyTorch's CPU index (tests pass their own; nothing is downloaded).
    """
    base = [python, "-m", "pip", "install", f"torch=={version}"]
    if index_url is not None:
        return [*base, "--index-url", index_url], f"torch {version} from {index_url}"
    if variant == "gpu":
        return base, (
            f"torch {version} from the default index (on Linux, PyPI's build is the CUDA one)"
        )
    if is_reachable(CPU_INDEX + "/torch/"):
        return [
            *base,
            "--index-url",
            CPU_INDEX,
        ], f"torch {version}, the CPU build, from {CPU_INDEX}"
    return base, (
        f"note: {CPU_INDEX} cannot be reached; torch {version} from the default index "
        "instead (a local wheel directory or mirror's build; from PyPI on Linux that is the "
        "multi-GB CUDA build)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--version", default=TORCH_VERSION, help="default %(default)s")
    parser.add_argument("--index-url", default=None, help="install from this index, no fallback")
    parser.add_argument("--dry-run", action="store_true", help="print the pip command only")
    parser.add_argument("-q", "--quiet", action="store_true", help="pass -q to pip")
    args = parser.parse_args(argv)
    have = installed_version()
    if satisfied(have, args.version, args.variant) and args.index_url is None:
        print(f"torch {have} is installed ({args.variant} requested): nothing to do")
        return 0
    command, where = pip_command(args.version, variant=args.variant, index_url=args.index_url)
    command += ["-q"] if args.quiet else []
    print(where, file=sys.stderr if where.startswith("note:") else sys.stdout)
    if args.dry_run:
        print(" ".join(command))
        return 0
    return subprocess.run(command).returncode


if __name__ == "__main__":
    raise SystemExit(main())
