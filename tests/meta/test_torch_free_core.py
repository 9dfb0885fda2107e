"""``import attnscale`` (the NumPy core, the CLI's first import) never imports torch; ``import
attnscale.torch``, whose modules import torch at the top, says how to install it where torch is not
installed. Each in a fresh interpreter: this process has imported torch already."""

from __future__ import annotations

import subprocess
import sys


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_import_attnscale_leaves_torch_unimported():
    done = _run("import sys, attnscale; attnscale.AuxRequest(lse=True); print('torch' in sys.modules)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_without_torch_import_attnscale_torch_names_the_install_command():
    code = (
        "import sys; sys.modules['torch'] = None\n"  # as if torch were not installed
        "import attnscale\n"
        "try:\n"
        "    import attnscale.torch\n"
        "except attnscale.MissingDependency as err:\n"
        "    print(err)\n"
    )
    done = _run(code)
    assert done.returncode == 0, done.stderr
    assert "pip install 'attnscale[torch]'" in done.stdout
