"""Deployment with Docker: the image (``deploy/Dockerfile``, built by :mod:`deploy.image`), a compose file for
one machine (``deploy/compose.yaml``), and ``roq deploy`` (:mod:`deploy.deployer`), which puts the processes a
cluster file describes (:mod:`deploy.cluster_file`) on several Docker hosts through the Engine API.
"""

from deploy.cluster_file import ClusterFile, load_cluster_file, parse_cluster_file
from deploy.deployer import SPARK_PYTHON, Deployer, DeployError

__all__ = ["ClusterFile", "Deployer", "DeployError", "SPARK_PYTHON", "load_cluster_file", "parse_cluster_file"]
