"""Run once, then replay: python quickstart.py HOST:PORT (a running opreg server)."""

import sys
import uuid

import opreg

with opreg.Client.connect(sys.argv[1]) as client:
    key = f"quickstart:{uuid.uuid4().hex}"
    first = client.run_once("examples", key, {"amount": 100}, lambda lease: b"paid")
    again = client.run_once("examples", key, {"amount": 100}, lambda lease: b"never runs")
    assert (first.value, first.replayed, again.value, again.replayed) == (b"paid", False, b"paid", True)
    print(f"opreg {opreg.__version__}: {first.value.decode()}, then replayed: {again.replayed}")
