"""The KRaft quorum and the cluster's features on Apache Kafka, with both
drivers (``kw``): DescribeQuorum (the single node leads and votes; the
metadata log's high watermark moves), ApiVersions' features (finalized
and supported levels, the finalized epoch), UpdateFeatures (a change
validated only, then made and undone, seen by describe_features; a level
the broker does not support refused per feature)."""

from __future__ import annotations

import time

import pytest

from kwire.admin import FeatureUpdate
from kwire.errors import InvalidUpdateVersionError

pytestmark = pytest.mark.kafka

FEATURE = "eligible.leader.replicas.version"       # one whose level changes nothing another test relies on


def test_describe_metadata_quorum(kw, kafka):
    with kw.Admin(bootstrap_servers=kafka.bootstrap()) as a:
        q = a.describe_metadata_quorum()
        node = a.describe_cluster().brokers[0].node_id
        assert (q.leader_id, [v.replica_id for v in q.voters]) == (node, [node])
        assert q.leader_epoch >= 1 and q.high_watermark > 0 and q.voters[0].log_end_offset >= q.high_watermark - 1
        assert q.voters[0].last_caught_up_timestamp is not None
        assert "CONTROLLER" in q.nodes[node]
        assert a.describe_quorum().leader_id == node


def _finalized(a, level: int) -> dict:
    deadline = time.monotonic() + 10
    while True:
        got = a.describe_features()
        if got.finalized_features.get(FEATURE, (0, 0))[1] == level or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_describe_and_update_features(kw, kafka):
    with kw.Admin(bootstrap_servers=kafka.bootstrap()) as a:
        f = a.describe_features()
        assert f.finalized_features["metadata.version"][1] >= 1 and f.finalized_features_epoch is not None
        low, high = f.supported_features[FEATURE]
        assert low == 0 and high >= 1
        level = f.finalized_features.get(FEATURE, (0, 0))[1]
        other = 0 if level else 1
        change = FeatureUpdate(other, "upgrade" if other > level else "safe_downgrade")
        a.update_features({FEATURE: change}, validate_only=True)
        assert a.describe_features().finalized_features.get(FEATURE, (0, 0))[1] == level
        a.update_features({FEATURE: change})
        try:
            assert _finalized(a, other).finalized_features.get(FEATURE, (0, 0))[1] == other
        finally:
            a.update_features({FEATURE: FeatureUpdate(level, "upgrade" if level > other else "safe_downgrade")})
        assert _finalized(a, level).finalized_features.get(FEATURE, (0, 0))[1] == level
        with pytest.raises(InvalidUpdateVersionError, match=FEATURE):
            a.update_features({FEATURE: FeatureUpdate(high + 1)})
        with pytest.raises(ValueError, match="upgrade_type"):
            a.update_features({FEATURE: FeatureUpdate(1, "sideways")})
