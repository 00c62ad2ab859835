import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "support"))
torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
# Tuning computes as on a CPU without bf16 arithmetic, whatever this host has (lm/precision.py), here and
# in the processes the tests start; tests/lm/test_precision.py fakes the capability where it needs one.
os.environ["SOFTEVAL_CPU_BF16"] = "0"


def pytest_report_header(config):
    """The library versions under test, at the top of every run (CI's log shows what it tested)."""
    import transformers

    versions = [f"transformers {transformers.__version__}", f"torch {torch.__version__}"]
    try:
        import peft

        versions.append(f"peft {peft.__version__}")
    except ImportError:
        pass
    return "softeval under " + ", ".join(versions)


@pytest.fixture
def lm():
    from tiny import tiny_lm

    return tiny_lm()


@pytest.fixture
def toy(monkeypatch):
    """The tiny format task (tests/tiny.py) registered as a task for one test."""
    from tiny import format_task

    from softeval import tasks

    task = format_task()
    monkeypatch.setitem(tasks.TASKS, task.name, task)
    return task


@pytest.fixture
def toymc(monkeypatch):
    """The synthetic multiple-choice task (tests/support/toymc.py) registered as a task for one test."""
    from toymc import mc_task

    from softeval import tasks

    task = mc_task()
    monkeypatch.setitem(tasks.TASKS, task.name, task)
    return task


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory):
    """One local Ray cluster for every sweep test (2 CPUs, no dashboard): starting one takes seconds.
    A ``ray.cluster_utils.Cluster``, so a test can add a second node and remove it."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster
    from toymethod import install

    src = str(Path(__file__).resolve().parents[1] / "src")
    # the workers also have a method of another distribution installed (tests/support/toymethod.py), as a user's
    # cluster would: tests/e2e/test_toy_method.py sweeps it
    plugin = str(install(tmp_path_factory.mktemp("method-plugin")))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    ray.init(address=cluster.address, log_to_driver=False, logging_level="WARNING",
             runtime_env={"env_vars": {
                 "PYTHONPATH": os.pathsep.join(p for p in (src, plugin, os.environ.get("PYTHONPATH")) if p)}})
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture(scope="session")
def trained_series(tmp_path_factory):
    """A tiny model pre-trained in the test session on a synthetic fact table (tests/synthetic_series.py),
    saved as checkpoint-100/ … checkpoint-400/, and the task file asking for the facts. Built once per
    session (about ten seconds of CPU)."""
    from synthetic_series import fact_table, train_series, write_task

    root = tmp_path_factory.mktemp("series")
    table = fact_table()
    checkpoints = train_series(root / "run", table)
    return {"folder": root / "run", "checkpoints": checkpoints, "task": write_task(root / "task", table),
            "table": table}
