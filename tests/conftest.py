import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
torch.set_num_threads(max(1, min(2, torch.get_num_threads())))


@pytest.fixture
def lm():
    from tiny import tiny_lm

    return tiny_lm()


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray cluster for every sweep test (2 CPUs, no dashboard): starting one takes seconds.
    A ``ray.cluster_utils.Cluster``, so a test can add a second node and remove it."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    src = str(Path(__file__).resolve().parents[1] / "src")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    ray.init(address=cluster.address, log_to_driver=False, logging_level="WARNING",
             runtime_env={"env_vars": {"PYTHONPATH": src}})
    yield cluster
    ray.shutdown()
    cluster.shutdown()
