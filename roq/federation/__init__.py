"""A tree of clusters (pure): each cluster's place in it, and the interest that decides where records go.

:mod:`roq.federation.tree` says who a cluster's children are, which clusters are below it, whom it refuses
and which link a record for a named cluster leaves by; :mod:`roq.federation.interest` what each link
advertises (interest travels up only, and down into a cluster's own subtree) and where a record goes;
:mod:`roq.federation.relay` what of one queue crosses one link, under which ids, and where to go on from;
:mod:`roq.federation.pace` how fast, under a link's rate limit. All
are decisions without sockets or clocks; the links and the GCM carry them out. The messages they exchange
are :mod:`roq.wire.control.links`.
"""

from roq.federation.interest import PARENT, Advert, InterestTable, Prefixes, Route, minimal
from roq.federation.pace import Pace
from roq.federation.relay import Entry, Relay, relay_id
from roq.federation.tree import SEPARATOR, Outcome, Refusal, Tree, address, check_name, split_address

__all__ = ["PARENT", "Advert", "InterestTable", "Prefixes", "Route", "minimal",
           "Entry", "Pace", "Relay", "relay_id",
           "SEPARATOR", "Outcome", "Refusal", "Tree", "address", "check_name", "split_address"]
