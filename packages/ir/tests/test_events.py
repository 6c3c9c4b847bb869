from torchsmith.ir import events


def test_observe_collects_events_in_order_and_stops_after_the_block():
    with events.observe() as seen:
        events.emit("prims", "graph", name="forward", graph=None)
        events.emit("inductor", "time", step="lower", seconds=0.5)
    events.emit("prims", "graph", name="late")
    assert [(e.stage, e.kind) for e in seen] == [("prims", "graph"), ("inductor", "time")]
    assert seen[1].payload == {"step": "lower", "seconds": 0.5}


def test_unsubscribe_is_idempotent():
    got = []
    unsubscribe = events.subscribe(got.append)
    events.emit("capture", "break", reason="x")
    unsubscribe()
    unsubscribe()
    events.emit("capture", "break", reason="y")
    assert [e.payload["reason"] for e in got] == ["x"]
