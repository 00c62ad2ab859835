"""The scripts under benchmarks/ as modules, for the tests that run their code (they are not a package)."""

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_benchmark(name: str):
    """``benchmarks/<name>.py``, imported anew. benchmarks/ goes on the path, as it is for a script run from
    there, so that a script finds the modules beside it (``perf``, ``gpu_check_inputs``, ``gpu_check_vllm``,
    ``bench_speed_peers``), which are imported as an import does: once a process."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.append(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import does: dataclasses look their module up while it runs
    spec.loader.exec_module(module)
    return module
