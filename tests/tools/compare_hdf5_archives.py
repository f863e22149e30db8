#!/usr/bin/python3
"""Compares two vmerge HDF5 archives written from the same checkpoint with different rank counts (h5py only).

    compare_hdf5_archives.py A/model.h5 B/model.h5

They must hold the same objects with the same root and dataset attributes, types, shapes, chunk shapes and filter
pipelines (id, flags, cd_values), and the same stored bytes: for a chunked dataset every chunk's filter mask and raw
frame (read_direct_chunk), for a contiguous one its data. Only where the chunks lie in the file may differ.
Prints up to 10 problems and exits 1, or "OK <n> datasets" and exits 0.
"""
import sys

import h5py
import numpy as np


def attributes(obj):
    out = {}
    for key, value in obj.attrs.items():
        out[key] = value.tolist() if isinstance(value, np.ndarray) else value
    return out


def pipeline(ds):
    plist = ds.id.get_create_plist()
    return [plist.get_filter(i) for i in range(plist.get_nfilters())]


def chunks(ds):
    out = {}
    for i in range(ds.id.get_num_chunks()):
        offset = ds.id.get_chunk_info(i).chunk_offset
        out[offset] = ds.id.read_direct_chunk(offset)
    return out


def raw(ds):
    arr = np.empty(ds.shape, dtype=np.dtype("V%d" % ds.id.get_type().get_size()))
    if ds.size:
        ds.id.read(h5py.h5s.ALL, h5py.h5s.ALL, arr, mtype=ds.id.get_type())
    return arr.tobytes()


def datasets(f):
    names = []
    f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
    return sorted(names)


def main():
    probs = []
    with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "r") as b:
        if attributes(a) != attributes(b):
            probs.append("root attributes differ")
        names = datasets(a)
        if names != datasets(b):
            probs.append("different datasets: %s" % sorted(set(names) ^ set(datasets(b))))
        for name in names:
            if name not in b:
                continue
            x, y = a[name], b[name]
            for what, get in (("attributes", attributes), ("type", lambda d: d.id.get_type().get_size()),
                              ("shape", lambda d: d.shape), ("chunks", lambda d: d.chunks),
                              ("filters", pipeline)):
                if get(x) != get(y):
                    probs.append("%s: %s differ: %s / %s" % (name, what, get(x), get(y)))
            if x.chunks is None:
                if raw(x) != raw(y):
                    probs.append("%s: stored bytes differ" % name)
            elif chunks(x) != chunks(y):
                probs.append("%s: stored chunks (mask, raw frame) differ" % name)
    for p in probs[:10]:
        print("FAIL:", p)
    if probs:
        return 1
    print("OK %d datasets" % len(names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
