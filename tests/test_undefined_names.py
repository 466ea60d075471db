"""No module of the package uses a name it never defined or imported (pyflakes' undefined-name check).

The LLM module split of issue 34 left `cache_dir` unimported in `kgqa_nb.llm.llamacpp`: every test passed, because the
tests load SmolLM2, and `make main` (Qwen2.5-Coder) failed at its first question. An import-time check cannot see
such a name, which is only looked up when the function runs; pyflakes reads every function body."""
from pathlib import Path
import pytest

ROOT = Path(__file__).parents[1]


def test_no_undefined_names():
    "Every name a module of kgqa_nb/ uses is defined, imported or a builtin."
    api = pytest.importorskip('pyflakes.api', reason='pyflakes is a dev requirement (settings.ini)')
    from pyflakes import messages
    from pyflakes.reporter import Reporter
    import io
    found = []

    class Collect(Reporter):
        def flake(self, message):
            if isinstance(message, (messages.UndefinedName, messages.UndefinedExport)): found.append(str(message))

    for path in sorted((ROOT/'kgqa_nb').rglob('*.py')):
        api.check(path.read_text(encoding='utf-8'), str(path.relative_to(ROOT)), Collect(io.StringIO(), io.StringIO()))
    assert not found, 'undefined names:\n' + '\n'.join(found)
