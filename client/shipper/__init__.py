"""A host's KPI shipper (``python -m client.shipper``, settings :class:`~roq.config.ShipperConfig`): the files of
the host's KPI archive published to the cluster's KPI queue as they are put in place, each line once; run by a host
manager with a KPI queue."""

from client.shipper._shipper import Shipped, Shipper, main

__all__ = ["Shipper", "Shipped", "main"]
