"""Multi-node capacity of the hyperscalers' cluster instance families: how the nodes are joined
(fabric, Gb/s per node) and how many of them a plan may assume it can rent together.

How many nodes you can actually get is quota and capacity, which no cloud publishes per family.
What the clouds do publish is that these families are built and sold as clusters far larger than
rentopt's planner ever uses (it caps a plan at 8 nodes): AWS "EC2 UltraClusters" of up to 20,000
H100 GPUs (2,500 p5 nodes) and more than 4,000 A100 GPUs (500 p4d nodes); Azure ND-series
"scale up to thousands of GPUs" over InfiniBand; Google's A3 "scale to tens of thousands of
GPUs". So every such offer carries the stated assumption below: ASSUMED_NODES nodes (the
planner's cap) can be rented together, with the page that says the family scales far beyond it.
Check your quota before you rely on a multi-node plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The planner's own cap on nodes per plan (optimizer/job.py MAX_NODES): assuming more would
# change nothing, assuming fewer would hide plans the published cluster sizes allow.
ASSUMED_NODES = 8


@dataclass(frozen=True)
class ClusterFamily:
    """A cluster instance family: its inter-node fabric and the page that documents its scale."""

    fabric: str  # models.Fabric: "infiniband", "roce" or "ethernet"
    fabric_gbps: float  # per node, Gbit/s
    scale: str  # what the cloud publishes about cluster size, quoted
    source: str  # the instance-type page

    def fields(self) -> dict[str, Any]:
        """Offer fields: fabric, fabric_gbps, nodes_available, and the assumption in `extra`."""
        return {
            "fabric": self.fabric,
            "fabric_gbps": self.fabric_gbps,
            "nodes_available": ASSUMED_NODES,
            "extra_nodes": (f"assumed: {ASSUMED_NODES} nodes can be rented together (the planner's cap); the cloud "
                            f"publishes {self.scale} ({self.source}); actual capacity depends on your quota"),
        }


def apply(fields: dict[str, Any], family: ClusterFamily | None, *, keep_feed_fabric: bool = False) -> dict[str, Any]:
    """`fields` (Offer keyword arguments) with the family's multi-node facts merged in.

    `keep_feed_fabric`: the price feed states the fabric itself (AWS's networkPerformance), so
    only the node count and its basis are added when it has one.
    """
    if family is None:
        return fields
    facts = family.fields()
    extra = dict(fields.get("extra") or {})
    extra["nodes_available_basis"] = facts.pop("extra_nodes")
    if keep_feed_fabric and fields.get("fabric_gbps"):
        facts.pop("fabric")
        facts.pop("fabric_gbps")
    return {**fields, **facts, "extra": extra}


_AWS = "https://aws.amazon.com/ec2/instance-types/"
_AZ = "https://learn.microsoft.com/en-us/azure/virtual-machines/"
_GCP_NET = "https://cloud.google.com/compute/docs/gpus/gpu-network-bandwidth"

# AWS: EFA is OS-bypass RDMA, used for multi-node training like InfiniBand.
AWS_P4D = ClusterFamily("infiniband", 400, "EC2 UltraClusters of more than 4,000 A100 GPUs (400 Gb/s EFA per node)",
                        _AWS + "p4/")
AWS_P5 = ClusterFamily("infiniband", 3200, "EC2 UltraClusters of up to 20,000 H100 GPUs (3,200 Gb/s EFA per node)",
                       _AWS + "p5/")
AWS_P5EN = ClusterFamily("infiniband", 3200, "EC2 UltraClusters of H200 GPUs (3,200 Gb/s EFAv3 per node)", _AWS + "p5/")
AWS_P6 = ClusterFamily("infiniband", 3200, "EC2 UltraClusters of B200 GPUs (3,200 Gb/s EFAv4 per node)", _AWS + "p6/")
AWS_FAMILIES = {"p4d": AWS_P4D, "p4de": AWS_P4D, "p5": AWS_P5, "p5e": AWS_P5EN, "p5en": AWS_P5EN, "p6-b200": AWS_P6}

# Azure ND-series with the 'r' (RDMA) letter: InfiniBand between VMs.
AZURE_ND_A100 = ClusterFamily("infiniband", 1600, "ND A100 v4 clusters that scale up to thousands of GPUs over "
                              "8 x 200 Gb/s HDR InfiniBand per VM", _AZ + "nda100-v4-series")
AZURE_ND_H100 = ClusterFamily("infiniband", 3200, "ND H100 v5 clusters that scale up to thousands of GPUs over "
                              "8 x 400 Gb/s NDR InfiniBand per VM", _AZ + "nd-h100-v5-series")
AZURE_ND_H200 = ClusterFamily("infiniband", 3200, "ND H200 v5 clusters over 8 x 400 Gb/s NDR InfiniBand per VM",
                              _AZ + "sizes/gpu-accelerated/nd-h200-v5-series")
AZURE_ND_MI300X = ClusterFamily("infiniband", 3200, "ND MI300X v5 clusters over 8 x 400 Gb/s NDR InfiniBand per VM",
                                _AZ + "sizes/gpu-accelerated/ndmi300xv5-series")
AZURE_NDV2 = ClusterFamily("infiniband", 100, "NDv2 clusters over 100 Gb/s EDR InfiniBand", _AZ + "ndv2-series")
AZURE_FAMILIES = {
    "Standard_ND96asr_v4": AZURE_ND_A100, "Standard_ND96amsr_A100_v4": AZURE_ND_A100,
    "Standard_ND96isr_H100_v5": AZURE_ND_H100, "Standard_ND96isr_H200_v5": AZURE_ND_H200,
    "Standard_ND96isr_MI300X_v5": AZURE_ND_MI300X, "Standard_ND40rs_v2": AZURE_NDV2,
}

# Google Cloud: A3 Ultra (H200) and A4 (B200) have 8 x 400 Gb/s RoCE (GPUDirect RDMA); A3 Mega
# and A3 High use GPUDirect-TCPXO / TCPX over Ethernet (1,800 and 1,000 Gb/s); A2 has 100 Gb/s.
GCP_A4 = ClusterFamily("roce", 3200, "A4 clusters with 3,200 Gb/s GPUDirect RDMA per VM", _GCP_NET)
GCP_A3_ULTRA = ClusterFamily("roce", 3200, "A3 Ultra clusters with 3,200 Gb/s GPUDirect RDMA per VM", _GCP_NET)
GCP_A3_MEGA = ClusterFamily("ethernet", 1800, "A3 Mega clusters with 1,800 Gb/s GPUDirect-TCPXO per VM", _GCP_NET)
GCP_A3_HIGH = ClusterFamily("ethernet", 1000, "A3 High clusters with 1,000 Gb/s GPUDirect-TCPX per VM", _GCP_NET)
GCP_FAMILIES = {
    "a4-highgpu-8g": GCP_A4, "a3-ultragpu-8g": GCP_A3_ULTRA, "a3-megagpu-8g": GCP_A3_MEGA,
    "a3-highgpu-8g": GCP_A3_HIGH, "a3-edgegpu-8g": GCP_A3_HIGH,
}
