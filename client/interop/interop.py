"""Interop, Python side: replays what the languages named on the command line
recorded (interop:<language>, result from-<language>), identifying the
parameters by a digest computed here, then records its own operation.

    python interop.py ADDRESS NAMESPACE LANGUAGE..."""

import sys

import opreg

from params import PARAMS


def must_not_run(lease: opreg.Lease) -> bytes:
    raise AssertionError("a recorded operation was executed again")


def main(endpoint: str, namespace: str, languages: list[str]) -> None:
    digest = opreg.parameters_digest(PARAMS)
    with opreg.Client.connect(endpoint) as client:
        for language in languages:
            replay = client.run_once(namespace, f"interop:{language}", digest, must_not_run)
            assert replay.replayed and replay.value == f"from-{language}".encode(), replay
        mine = client.run_once(namespace, "interop:python", PARAMS, lambda lease: b"from-python")
        assert not mine.replayed and mine.value == b"from-python", mine
    replayed = ", ".join(f"interop:{language}" for language in languages)
    print(f"python: replayed {replayed} by digest, recorded interop:python")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
