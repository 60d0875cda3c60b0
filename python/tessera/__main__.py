"""python -m tessera info: what this build of Tessera contains."""

from __future__ import annotations

import sys

import tessera


def print_info() -> None:
    info = tessera.info()
    print(f"tessera {info['version']} (Python package)")
    print(f"backends: {', '.join(info['backends'])}; cuda available: {info['cuda_available']}")
    print("build:")
    for key, value in info["build"].items():
        if value:  # cuda, NCCL, NVSHMEM and CUTLASS versions are empty in a cpu-only build
            print(f"  {key}: {value}")
    print(f"gpus: {len(info['gpus'])}")
    for gpu in info["gpus"]:
        print(f"  {gpu['index']}: {gpu['name']} ({gpu['memory_gib']:.0f} GiB, {gpu['sm_count']} SMs)")
    print("parameters (environment variables):")
    for p in info["params"]:
        origin = "environment" if p["from_environment"] else "default"
        print(f"  {p['name']} = {p['value']} ({origin}): {p['help']}")


def main(argv: list[str]) -> int:
    if argv[1:] in ([], ["info"]):
        print_info()
        return 0
    print("usage: python -m tessera info", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
