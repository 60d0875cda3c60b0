"""The README's Python example runs as printed, and stays within 15 lines."""

import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) == 1, "one Python example in the README"
    code = blocks[0]
    assert len(code.strip().splitlines()) <= 15
    exec(compile(code, str(README), "exec"), {})  # ends with an assert against tessera.attention
