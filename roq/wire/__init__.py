"""Wire and stored shapes: everything that crosses a process or lands on disk or in ZooKeeper, defined once.
The checked-shape mechanism (:mod:`.shape`), the data plane's batches (:mod:`.batch`), the control messages
(:mod:`.control`), the ZooKeeper documents (:mod:`.documents`), the management API (:mod:`.management`), the
monitor's status (:mod:`.status`), the ready line a process prints once it serves (:mod:`.ready`) and the
command pipe's frames (:mod:`.pipe`)."""
