"""Capture real Tansu responses into tests/protocol/captured/ (run by hand:
``python -m protocol.capture_tansu`` from tests/); test_captured.py decodes
them offline. Each capture is NAME.bin (the frame without its size) and a
line in index.json: the response class, version and what the request was."""

from __future__ import annotations

import json
import os

from kwire import RecordBatchBuilder
from kwire.protocol import messages as m
from support.tansu import start_tansu
from support.wire import exchange

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "captured")


def main() -> None:
    os.makedirs(HERE, exist_ok=True)
    index = {}
    with start_tansu() as b:
        def cap(name, req, version, resp_cls, note):
            frame = exchange(b.host, b.port, req, version)
            with open(os.path.join(HERE, name + ".bin"), "wb") as f:
                f.write(frame)
            index[name] = {"response": resp_cls.__name__, "version": version, "request": note}

        for v in (0, 3):
            cap(f"api_versions_v{v}", m.ApiVersionsRequest(client_software_name="kwire", client_software_version="0"),
                v, m.ApiVersionsResponse, f"ApiVersions v{v}")
        ct = m.CreateTopicsRequest
        cap("create_topics_v5", ct(topics=[ct.CreatableTopic(name="cap", num_partitions=2, replication_factor=1)],
                                   timeout_ms=5000), 5, m.CreateTopicsResponse, "CreateTopics cap x2")
        for v in (1, 12):
            mr = m.MetadataRequest
            cap(f"metadata_v{v}", mr(topics=[mr.MetadataRequestTopic(name="cap")]), v, m.MetadataResponse,
                f"Metadata v{v} for topic cap")
        builder = RecordBatchBuilder("lz4")
        for i in range(5):
            builder.append(b"value-%d" % i, key=b"k%d" % i, headers=[("h", b"x")], timestamp=1_700_000_000_000 + i)
        pr = m.ProduceRequest
        cap("produce_v9", pr(acks=-1, timeout_ms=5000, topic_data=[pr.TopicProduceData(name="cap", partition_data=[
            pr.PartitionProduceData(index=0, records=builder.build())])]), 9, m.ProduceResponse, "5 lz4 records")
        fr = m.FetchRequest
        for v in (4, 12):
            cap(f"fetch_v{v}", fr(max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, topics=[fr.FetchTopic(
                topic="cap", partitions=[fr.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]),
                v, m.FetchResponse, f"Fetch v{v} of cap[0] from 0")
        lo = m.ListOffsetsRequest
        cap("list_offsets_v7", lo(replica_id=-1, topics=[lo.ListOffsetsTopic(name="cap", partitions=[
            lo.ListOffsetsPartition(partition_index=0, timestamp=-2)])]), 7, m.ListOffsetsResponse, "earliest of cap[0]")
        cap("describe_cluster_v0", m.DescribeClusterRequest(), 0, m.DescribeClusterResponse, "DescribeCluster")
        dc = m.DescribeConfigsRequest
        cap("describe_configs_v4", dc(resources=[dc.DescribeConfigsResource(resource_type=2, resource_name="cap",
                                                                           configuration_keys=None)]),
            4, m.DescribeConfigsResponse, "configs of topic cap")
    with open(os.path.join(HERE, "index.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
