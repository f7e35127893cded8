"""Interop, Python side: replays what the Rust CLI recorded, identifying the
parameters by a digest computed here, then records its own operation."""

import sys

import opreg

from params import PARAMS


def must_not_run(lease: opreg.Lease) -> bytes:
    raise AssertionError("a recorded operation was executed again")


def main(endpoint: str, namespace: str) -> None:
    digest = opreg.parameters_digest(PARAMS)
    with opreg.Client.connect(endpoint) as client:
        replay = client.run_once(namespace, "interop:rust", digest, must_not_run)
        assert replay.replayed and replay.value == b"from-rust", replay
        mine = client.run_once(namespace, "interop:python", PARAMS, lambda lease: b"from-python")
        assert not mine.replayed and mine.value == b"from-python", mine
    print("python: replayed interop:rust by digest, recorded interop:python")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
