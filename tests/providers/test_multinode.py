"""Multi-node capacity on the hyperscalers' cluster families (issue: 70B full training needs
several nodes): fabric, its speed and a node count whose basis is stated and cited."""

from __future__ import annotations

from rentopt.providers import multinode
from rentopt.providers.aws import AwsProvider
from rentopt.providers.azure import AzureProvider
from tests.providers.helpers import fetch_recorded


def offers(cls):
    outcome, _ = fetch_recorded(cls, assert_all_called=False)
    assert outcome.status == "ok", outcome.error
    return outcome.offers


def test_aws_p4d_and_p5_can_be_planned_on_several_nodes():
    by_type = {}
    for o in offers(AwsProvider):
        by_type.setdefault(o.extra["instance_type"], o)
    p5 = by_type["p5.48xlarge"]
    # p5: 3,200 Gb/s EFA per node (aws.amazon.com/ec2/instance-types/p5/), as the feed's networkPerformance says
    assert (p5.fabric, p5.fabric_gbps, p5.nodes_available) == ("infiniband", 3200, 8)
    assert "aws.amazon.com/ec2/instance-types/p5/" in p5.extra["nodes_available_basis"]
    assert p5.extra["nodes_available_basis"].startswith("assumed: 8 nodes")
    # a single-node family stays one node
    g5 = next(o for t, o in by_type.items() if t.startswith("g5."))
    assert g5.nodes_available == 1 and "nodes_available_basis" not in g5.extra


def test_azure_nd_infiniband_sizes_can_be_planned_on_several_nodes_the_others_not():
    found = {o.extra["instance_type"]: o for o in offers(AzureProvider)}
    nd = found["Standard_ND96isr_H100_v5"]
    assert (nd.fabric, nd.fabric_gbps, nd.nodes_available) == ("infiniband", 3200, 8)
    assert "nd-h100-v5-series" in nd.extra["nodes_available_basis"]
    nc = next(o for t, o in found.items() if t.startswith("Standard_NC"))
    assert nc.nodes_available == 1 and nc.fabric is None


def test_the_assumed_node_count_is_the_planners_cap():
    from rentopt.optimizer.job import MAX_NODES

    assert multinode.ASSUMED_NODES == MAX_NODES == 8
