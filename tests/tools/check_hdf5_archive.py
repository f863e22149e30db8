#!/usr/bin/python3
"""Independent checker for a vmerge HDF5 archive (h5py, numpy and zstandard / the zstd CLI; no vmerge code).

    check_hdf5_archive.py --archive DIR --ref REF [--hf HFDIR] [--compressed]

DIR/model.h5 is compared with the reference HF folder REF (read by check_hf_output.py):
  * root attributes: vmerge_archive_version 1, tensor_names = REF's tensors, total_size = their bytes;
  * every tensor at its dataset path (dots -> groups) with attributes hf_name, dtype, shape as in REF;
  * the stored bytes, read with the file type as memory type, equal REF's bytes (bf16 bits, NaN payloads);
  * what plain h5py returns (ds[()]) equals REF's values: bf16 widened exactly to float32, others as they are;
  * with --compressed every non-scalar dataset is chunked with filter 32015, every chunk is allocated and its raw
    bytes (read_direct_chunk) are one zstd frame that an independent zstd decompresses to the chunk's bytes;
  * with --hf every non-weight file of HFDIR is in the archive (hf_files/<path>) and beside it, byte for byte.
Prints up to 10 problems and exits 1, or "OK <n> tensors" and exits 0.
"""
import argparse
import os
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_hf_output as hf  # noqa: E402

ZSTD_FILTER = 32015
RAW = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
PLAIN = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64, "I32": np.int32,
         "I16": np.int16, "I8": np.int8, "U8": np.uint8, "U16": np.uint16, "U32": np.uint32, "U64": np.uint64}


def zstd_decompress(frame):
    try:
        import zstandard
        return zstandard.ZstdDecompressor().decompress(frame)  # needs the content size in the frame
    except ImportError:
        return subprocess.run(["zstd", "-d", "-c", "-q"], input=frame, stdout=subprocess.PIPE, check=True).stdout


def raw_bytes(ds):
    arr = np.empty(ds.shape, dtype=RAW[ds.id.get_type().get_size()])
    ds.id.read(h5py.h5s.ALL, h5py.h5s.ALL, arr, mtype=ds.id.get_type())
    return arr.tobytes()


def check_values(name, ds, dt, ref_bytes, probs):
    values = ds[()]
    if dt == "BF16":
        want = (np.frombuffer(ref_bytes, np.uint16).astype(np.uint32) << 16).view(np.float32)
        if values.dtype != np.float32:
            probs.add("%s: h5py reads bf16 as %s, expected float32" % (name, values.dtype))
        elif not np.array_equal(np.asarray(values).reshape(-1), want, equal_nan=True):
            probs.add("%s: h5py's float32 values differ from the reference bf16 values" % name)
    elif dt in PLAIN:
        want = np.frombuffer(ref_bytes, PLAIN[dt])
        if np.asarray(values).reshape(-1).tobytes() != want.tobytes():
            probs.add("%s: h5py's %s values differ from the reference" % (name, values.dtype))


def check_chunks(name, ds, ref_bytes, probs):
    plist = ds.id.get_create_plist()
    filters = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
    if ds.chunks is None or filters != [ZSTD_FILTER]:
        probs.add("%s: expected chunks with the zstd filter only, got chunks %s filters %s" % (name, ds.chunks, filters))
        return
    rows = ds.shape[0]
    chunk_rows = ds.chunks[0]
    if tuple(ds.chunks[1:]) != tuple(ds.shape[1:]):
        probs.add("%s: chunks %s do not span whole rows of %s" % (name, ds.chunks, ds.shape))
        return
    row_bytes = len(ref_bytes) // rows
    expected_chunks = -(-rows // chunk_rows)
    if ds.id.get_num_chunks() != expected_chunks:
        probs.add("%s: %d chunks stored, expected %d" % (name, ds.id.get_num_chunks(), expected_chunks))
    for i in range(ds.id.get_num_chunks()):
        info = ds.id.get_chunk_info(i)
        mask, frame = ds.id.read_direct_chunk(info.chunk_offset)
        if mask != 0:
            probs.add("%s chunk %s: filter mask %d (zstd skipped)" % (name, info.chunk_offset, mask))
            continue
        data = zstd_decompress(frame)
        first = info.chunk_offset[0]
        valid = min(chunk_rows, rows - first) * row_bytes
        if len(data) != chunk_rows * row_bytes:
            probs.add("%s chunk %s: %d bytes decompressed, a chunk holds %d" % (name, info.chunk_offset, len(data),
                                                                               chunk_rows * row_bytes))
        elif data[:valid] != ref_bytes[first * row_bytes:first * row_bytes + valid]:
            probs.add("%s chunk %s: decompressed bytes differ from the reference rows" % (name, info.chunk_offset))


def check(archive_dir, ref_dir, hf_dir=None, compressed=False):
    probs = hf.Problems()
    ref = hf.read_folder(ref_dir, probs, False, "REF")
    with h5py.File(os.path.join(archive_dir, "model.h5"), "r") as f:
        if f.attrs.get("vmerge_archive_version") != 1:
            probs.add("/: vmerge_archive_version is %r" % f.attrs.get("vmerge_archive_version"))
        names = [n.decode() if isinstance(n, bytes) else n for n in f.attrs["tensor_names"]]
        if sorted(names) != sorted(ref):
            probs.add("/: tensor_names %s differ from the reference's %s" % (sorted(names), sorted(ref)))
        total = sum(len(b) for _, _, b in ref.values())
        if int(f.attrs["total_size"]) != total:
            probs.add("/: total_size %d, the reference holds %d bytes" % (int(f.attrs["total_size"]), total))
        for name in sorted(ref):
            dt, shape, ref_bytes = ref[name]
            path = name.replace(".", "/")
            if path not in f:
                probs.add("%s: no dataset %s" % (name, path))
                continue
            ds = f[path]
            attrs = ds.attrs
            if attrs["hf_name"] != name or attrs["dtype"] != dt:
                probs.add("%s: attributes hf_name %r dtype %r" % (name, attrs["hf_name"], attrs["dtype"]))
            stored_shape = tuple(int(x) for x in attrs["shape"]) if attrs["shape"].shape is not None else ()
            if stored_shape != tuple(shape) or ds.shape != tuple(shape):
                probs.add("%s: shape attribute %s, dataset %s, reference %s" % (name, stored_shape, ds.shape, shape))
                continue
            if raw_bytes(ds) != ref_bytes:
                probs.add("%s: stored bytes differ (%s)" % (name, hf._first_diff(raw_bytes(ds), ref_bytes, dt)))
                continue
            check_values(name, ds, dt, ref_bytes, probs)
            if compressed and len(shape) > 0 and len(ref_bytes) > 0:
                check_chunks(name, ds, ref_bytes, probs)
        if hf_dir:
            for root, _dirs, files in os.walk(hf_dir):
                for fname in files:
                    rel = os.path.relpath(os.path.join(root, fname), hf_dir)
                    if hf.WEIGHT_FILE_RE.fullmatch(fname):
                        continue
                    with open(os.path.join(root, fname), "rb") as src:
                        want = src.read()
                    key = "hf_files/" + rel
                    if key not in f or bytes(f[key][()]) != want:
                        probs.add("HF file %s missing from the archive or different" % rel)
            hf.compare_hf(archive_dir, hf_dir, probs)
    return probs, len(ref)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--archive", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--hf")
    ap.add_argument("--compressed", action="store_true")
    a = ap.parse_args()
    probs, n = check(a.archive, a.ref, a.hf, a.compressed)
    if probs:
        for p in probs[:10]:
            print("FAIL:", p)
        return 1
    print("OK %d tensors" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
