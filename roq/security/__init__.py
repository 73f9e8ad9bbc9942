"""Security on the floor: who may connect and what they may do. CURVE keys and the keyring (:mod:`.keys`),
the ZAP handler that admits them (:mod:`.zap`), sockets made secure (:mod:`.curve`) and the permission rules
(:mod:`.acl`)."""
