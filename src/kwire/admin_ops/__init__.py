"""The admin calls' request and response shaping beside :mod:`kwire.admin`
(issue 33): each module builds one family's requests from Kafka's argument
shapes and reads their responses into typed results and kwire errors,
without I/O. :class:`kwire.admin.Admin` sends them (as steps, so both
drivers run the same code); nothing here imports the admin client.

- :mod:`.configs`: config resources (topics, brokers, broker loggers, groups,
  client metrics), IncrementalAlterConfigs' operations, AlterConfigs.
- :mod:`.log_dirs`: brokers' log dirs and the replicas in them; moving a
  replica between the dirs of its broker.
- :mod:`.scram`: users' SCRAM credentials, described and changed (KIP-554).
- :mod:`.transactions`: partitions' producers, transactions listed,
  described, aborted on a partition and fenced (KIP-664).
- :mod:`.cluster`: the KRaft metadata quorum; the cluster's features,
  described and updated.
- :mod:`.share`: share groups (KIP-932) described; their start offsets
  listed (with lag), altered and deleted.
- :mod:`.leftovers`: the one module here that makes calls, through an
  admin client it is given: the transactional ids and marker groups a Spark
  query's exactly-once sink leaves (``kwire transactions abort|forget
  --query``, and :mod:`kwire.spark.exactly_once` after a failed job).
"""
