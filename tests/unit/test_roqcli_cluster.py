"""roqcli cluster: the cluster's place in a tree of clusters, from ``roq cluster up``'s flags to its GCMs'."""

from __future__ import annotations

import os

from gcm import GcmConfig
from roq.settings import from_args, parser_for
from roqcli.cluster import ClusterSettings, federation_args


def test_a_cluster_outside_a_tree_gives_its_gcms_no_place():
    assert federation_args(ClusterSettings()) == []


def test_a_leaf_gives_its_gcms_its_name_role_and_parent_and_they_take_them():
    s = ClusterSettings(cluster_name="store-1", cluster_role="leaf", parent_zk="127.0.0.1:2181", parent_root="/hq",
                        parent_credentials="creds")
    args = federation_args(s)
    assert args == ["--cluster-name", "store-1", "--cluster-role", "leaf", "--parent-zk", "127.0.0.1:2181",
                    "--parent-root", "/hq", "--parent-credentials", os.path.abspath("creds")]
    parsed = parser_for(GcmConfig, prog="gcm", description="", section="gcm").parse_args(["--zk", "127.0.0.1:1", *args])
    config = from_args(GcmConfig, "gcm", parsed)
    assert (config.cluster_name, config.cluster_role, config.parent_zk, config.parent_root) == (
        "store-1", "leaf", "127.0.0.1:2181", "/hq")
    assert federation_args(ClusterSettings(cluster_name="hq")) == ["--cluster-name", "hq", "--cluster-role", "root"]
