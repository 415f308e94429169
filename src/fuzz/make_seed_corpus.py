#!/usr/bin/env python3
"""Writes the seed inputs of the file-reader fuzzers (seed_* in corpus/<reader>).

  make_seed_corpus.py SPILLWAY_BINARY

The .npy, checkpoint and node-link graph seeds are built here from their
formats (docs/fuzzing.md names them); the hardware profiles from `spillway hardware --json`, one per
built-in profile. Each corpus also gets a few seeds that a reader must
refuse, so the fuzzer starts from both sides of every check. Rerun it when a
format changes; inputs the fuzzer found (not seed_*) are kept.
"""

import json
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def npy(descr, shape, payload, version=1, fortran=False):
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, "True" if fortran else "False",
        "(" + "".join(f"{d}, " for d in shape) + ")" if len(shape) != 1 else f"({shape[0]},)")
    size_bytes = 2 if version == 1 else 4
    total = 8 + size_bytes + len(header) + 1
    header += " " * ((64 - total % 64) % 64) + "\n"
    size = struct.pack("<H" if version == 1 else "<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + size + header.encode() + payload


def fnv1a(data):
    h = 0xcbf29ce484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def checkpoint(tensors, step=3, seed=7, fingerprint=0x1234):
    def string(text):
        return struct.pack("<I", len(text)) + text.encode()
    out = b"SPILLWAY-CKPT" + struct.pack("<IQqQI", 1, fingerprint, step, seed, len(tensors))
    for name, kind, dtype, shape, payload in tensors:
        out += string(name) + string(kind) + string(dtype) + struct.pack("<I", len(shape))
        out += b"".join(struct.pack("<q", d) for d in shape)
        out += struct.pack("<Q", len(payload)) + payload
    return out + struct.pack("<Q", fnv1a(out))


def write(reader, name, content):
    directory = os.path.join(HERE, "corpus", reader)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "seed_" + name), "wb") as f:
        f.write(content if isinstance(content, bytes) else content.encode())


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    binary = sys.argv[1]

    floats = struct.pack("<6f", 0.5, -1, 2, 3.25, 0, 1e-3)
    write("npy", "f32_2x3.npy", npy("<f4", (2, 3), floats))
    write("npy", "i64_vector.npy", npy("<i8", (3,), struct.pack("<3q", 1, -2, 3)))
    write("npy", "f32_scalar.npy", npy("<f4", (), struct.pack("<f", 42)))
    write("npy", "f32_empty.npy", npy("<f4", (0, 4), b""))
    write("npy", "version2.npy", npy("<f4", (2, 3), floats, version=2))
    write("npy", "refused_fortran.npy", npy("<f4", (2, 3), floats, fortran=True))
    write("npy", "refused_big_endian.npy", npy(">f4", (2, 3), floats))
    write("npy", "refused_truncated.npy", npy("<f4", (2, 3), floats[:10]))
    write("npy", "refused_huge_shape.npy", npy("<f4", (1 << 32, 1 << 32, 1 << 32), b""))

    profiles = json.loads(subprocess.run([binary, "hardware", "--json"], capture_output=True,
                                         text=True, check=True).stdout)
    for profile in profiles:
        write("hardware_profile", profile["name"] + ".json", json.dumps(profile, indent=2))
    base = profiles[0]
    write("hardware_profile", "refused_reserve.json",
          json.dumps(dict(base, reserved_bytes=base["device_memory_bytes"] * 2)))
    write("hardware_profile", "refused_duplicate.json",
          json.dumps(base)[:-1] + ', "copy_engines": 1}')
    write("hardware_profile", "refused_overflow.json",
          json.dumps(dict(base, fp32_flops=1)).replace('"fp32_flops": 1', '"fp32_flops": 1e400'))
    write("hardware_profile", "refused_deep.json", "[" * 80 + "]" * 80)

    weights = struct.pack("<4f", 0.1, 0.2, 0.3, 0.4)
    tensors = [("fc.weight", "param", "f32", (2, 2), weights),
               ("fc.bias", "param", "f32", (2,), struct.pack("<2f", 0, 0)),
               ("bn.running_mean", "buffer", "f32", (2,), struct.pack("<2f", 0, 0)),
               ("fc.weight.momentum", "state", "f32", (2, 2), bytes(16)),
               ("adam.step", "state", "i64", (), struct.pack("<q", 4))]
    write("checkpoint", "small.ckpt", checkpoint(tensors))
    write("checkpoint", "empty.ckpt", checkpoint([]))
    good = checkpoint(tensors)
    write("checkpoint", "refused_checksum.ckpt", good[:-1] + bytes([good[-1] ^ 1]))
    write("checkpoint", "refused_truncated.ckpt", good[:len(good) // 2])
    write("checkpoint", "refused_version.ckpt", good[:13] + struct.pack("<I", 9) + good[17:])
    write("checkpoint", "refused_kind.ckpt",
          checkpoint([("x", "bogus", "f32", (1,), bytes(4))]))

    def graph(nodes, links, attrs=None):
        return json.dumps({"directed": True, "graph": attrs or {},
                           "nodes": [dict(zip(("id", "duration", "size"), n[:3]),
                                          **({"phase": n[3]} if len(n) > 3 else {}))
                                     for n in nodes],
                           "links": [{"source": a, "target": b} for a, b in links]})
    training = [("f1", 1e-3, 4096, "forward"), ("f2", 2e-3, 8192, "forward"),
                ("b2", 2e-3, 8192, "backward"), ("b1", 1e-3, 4096, "backward")]
    training_links = [("f1", "f2"), ("f2", "b2"), ("b2", "b1"), ("f1", "b1")]
    write("node_link", "training.json", graph(training, training_links))
    write("node_link", "ordered.json", graph(training, training_links,
                                             {"order": ["f1", "f2", "b2", "b1"],
                                              "outputs": ["b1"], "time_unit": "ms"}))
    dag = [(i, 1 + i, 100 * (i % 3 + 1)) for i in range(6)]
    write("node_link", "dag.json", graph(dag, [(0, 1), (1, 2), (2, 3), (0, 3), (3, 4), (4, 5), (1, 5)]))
    write("node_link", "refused_cycle.json", graph(dag[:2], [(0, 1), (1, 0)]))
    write("node_link", "refused_negative.json", graph([("a", 1, -1)], []))
    write("node_link", "refused_phases.json", graph([training[0], ("x", 1, 1)], []))
    write("node_link", "refused_dangling.json", graph(dag[:1], [(0, 9)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
