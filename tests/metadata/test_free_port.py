"""``free_port`` never hands the same port out twice in a row of calls: processes started
together (a cluster's bookies) are each told a port of their own."""

from magnetar.metadata.zookeeper_server import free_port


def test_ports_handed_out_together_are_distinct() -> None:
    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports)
