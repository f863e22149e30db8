"""Corpus cases of the HDF5 archive as input (merge --backend hdf5, verify): archives written
here with h5py in vmerge's layout (docs/hdf5.md), then made hostile in one way each: bytes kept
outside the file (external storage, a FIFO among them; virtual datasets; external and soft
links), bytes never written, a stored type other than the one vmerge writes (big-endian, an
integer for a float), chunks other than vmerge's (not whole rows, other filters, a missing or
unfiltered chunk, zstd frames that decode to less than the chunk or claim 1 GiB), and an HF file
named like a weight file. The expected texts are built here from what each case damaged.

Needs Debian's python3-h5py and python3-zstandard, and the project's zstd filter plugin on
HDF5_PLUGIN_PATH (ctest sets it) to create zstd datasets; chunks are stored raw
(write_direct_chunk), so the frames are exactly the ones made here."""
import json
import os
import struct

import h5py
import numpy as np
import zstandard

from corpus_lib import case

ZSTD = 32015
LEVEL = 3
SECRET = b"the user's secret, never to be read into a model\n" * 4
CONFIG = json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}) + "\n"
# name, dataset path, numpy dtype (little-endian, as vmerge stores it), shape, rows per chunk
NORM = ("model.norm.weight", "model/norm/weight", "<f4", (8,), 4)
EMBED = ("model.embed.weight", "model/embed/weight", "<f4", (6, 4), 2)
EMBED_CHUNK_BYTES = 2 * 4 * 4
TENSORS = [EMBED, NORM]


def values(shape, seed):
    return (np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) * 0.25 + seed).astype("<f4")


def str_attr(obj, name, value):
    obj.attrs.create(name, value, dtype=h5py.string_dtype("utf-8"))


def tensor_attrs(ds, name, dtype, shape):
    str_attr(ds, "hf_name", name)
    str_attr(ds, "dtype", dtype)
    ds.attrs.create("shape", np.array(shape, dtype="<i8"))


def frame(data):
    """One zstd frame that records its content size, as vmerge and the HDFGroup plugin make."""
    return zstandard.ZstdCompressor(level=LEVEL, write_content_size=True).compress(bytes(data))


def frame_claiming(size):
    """A frame header that records `size` decompressed bytes, then one empty last raw block."""
    magic = struct.pack("<I", 0xFD2FB528)
    descriptor = bytes([0xE0])  # 8-byte content size, single segment
    return magic + descriptor + struct.pack("<Q", size) + bytes([1, 0, 0])


def zstd_create(f, path, shape, chunks, dtype="<f4", shuffle=False, maxshape=None, optional=False):
    """A chunked dataset with the zstd filter as vmerge sets it: mandatory, cd_values = (level,).
    (h5py's create_dataset(compression=32015) makes any filter it does not know optional.)"""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk(tuple(chunks))
    if shuffle:
        dcpl.set_shuffle()
    dcpl.set_filter(ZSTD, h5py.h5z.FLAG_OPTIONAL if optional else h5py.h5z.FLAG_MANDATORY, (LEVEL,))
    lcpl = h5py.h5p.create(h5py.h5p.LINK_CREATE)
    lcpl.set_create_intermediate_group(True)
    maxshape = tuple(h5py.h5s.UNLIMITED if m is None else m for m in maxshape) if maxshape else None
    space = h5py.h5s.create_simple(tuple(shape), maxshape)
    tid = h5py.h5t.py_create(np.dtype(dtype))
    return h5py.Dataset(h5py.h5d.create(f.id, path.encode(), tid, space, dcpl=dcpl, lcpl=lcpl))


def zstd_dataset(f, path, array, chunk_rows, dtype="<f4", chunks=None, frames=None, mask=0, filters=(),
                 optional=False):
    """A chunked dataset with the zstd filter, each chunk stored raw: frames[i] or the frame of its rows."""
    chunks = chunks or (chunk_rows,) + array.shape[1:]
    ds = zstd_create(f, path, array.shape, chunks, dtype, shuffle="shuffle" in filters, optional=optional)
    rows = chunks[0]
    for i, first in enumerate(range(0, array.shape[0], rows)):
        if frames is not None and i >= len(frames):
            break
        block = np.zeros((rows,) + array.shape[1:], dtype=dtype)
        part = array[first:first + rows]
        block[:len(part)] = part
        data = frames[i] if frames is not None and frames[i] is not None else frame(block.tobytes())
        ds.id.write_direct_chunk((first,) + (0,) * (array.ndim - 1), data, filter_mask=mask)
    return ds


def write_archive(folder, compression="none", replace=None, files=None):
    """folder/model.h5 in vmerge's layout: EMBED and NORM (zstd-chunked when compressing), the
    root index, hf_files/config.json. `replace[path](f, array)` makes a tensor's dataset instead."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.h5")
    replace = replace or {}
    with h5py.File(path, "w", libver=("v108", "latest")) as f:
        total = 0
        for seed, (name, dspath, dtype, shape, chunk_rows) in enumerate(TENSORS):
            array = values(shape, seed)
            total += array.nbytes
            if dspath in replace:
                ds = replace[dspath](f, array)
            elif compression != "none":
                ds = zstd_dataset(f, dspath, array, chunk_rows)
            else:
                ds = f.create_dataset(dspath, data=array)
            if ds is not None:
                tensor_attrs(ds, name, "F32", shape)
        for rel, data in (files if files is not None else {"config.json": CONFIG.encode()}).items():
            f.create_dataset("hf_files/" + rel, data=np.frombuffer(data, dtype="u1"))
        f.attrs.create("vmerge_archive_version", np.int64(1))
        f.attrs.create("total_size", np.uint64(total))
        f.attrs.create("tensor_names", [t[0] for t in TENSORS], dtype=h5py.string_dtype("utf-8"))
        str_attr(f, "compression", compression)
        str_attr(f, "files_group", "hf_files")
    return path


def add_cases(good_fsdp, good_megatron, out):
    if not h5py.h5z.filter_avail(ZSTD):
        raise SystemExit("cases_hdf5: the zstd filter 32015 is not available to h5py: build the vmerge_h5z_zstd "
                         "target and put build/hdf5-plugins on HDF5_PLUGIN_PATH (ctest does)")
    root = os.path.join(out, "hdf5")
    good_cases(root)
    outside_cases(root)
    type_and_allocation_cases(root)
    chunk_cases(root)
    file_cases(root)


def good_cases(root):
    for compression in ("none", f"zstd:{LEVEL}"):
        name = "hdf5_good_" + compression.split(":")[0]
        folder = os.path.join(root, name)
        write_archive(folder, compression)
        case(name, folder, [], f"an archive in vmerge's layout ({compression}) converts back", exit=0,
             args=["--backend", "hdf5"], output=["vmerge: converted 2 tensors"],
             target_has=["model.safetensors", "config.json"])
    folder = os.path.join(root, "hdf5_verify_good")
    write_archive(folder, f"zstd:{LEVEL}")
    case("hdf5_verify_good", "", [], "verify on a good archive without a checksum list", command="verify",
         target=folder, exit=0, output=["no vmerge.checksums.json beside model.h5",
                                        "vmerge verify: OK, 2 tensors in " + os.path.join(folder, "model.h5")])


def outside_cases(root):
    """Bytes or objects outside the archive: nothing of them is read, nothing waits on a FIFO."""
    name = "hdf5_external_storage_secret"
    folder = os.path.join(root, name, "archive")
    secret = os.path.join(root, name, "secret.txt")
    os.makedirs(os.path.dirname(secret), exist_ok=True)
    with open(secret, "wb") as s:
        s.write(SECRET)
    arch = write_archive(folder, replace={NORM[1]: lambda f, a: f.create_dataset(
        NORM[1], shape=a.shape, dtype="<f4", external=[(secret, 0, a.nbytes)])})
    case(name, folder, f"{arch} /{NORM[1]}: its data is stored in the external file '{secret}'; expected its bytes "
         "inside the archive", "a tensor's bytes in an external file (a secret beside the archive)",
         args=["--backend", "hdf5"])

    name = "hdf5_external_storage_fifo"
    folder = os.path.join(root, name, "archive")
    fifo = os.path.join(root, name, "fifo")
    arch = write_archive(folder, replace={NORM[1]: lambda f, a: f.create_dataset(
        NORM[1], shape=a.shape, dtype="<f4", external=[(fifo, 0, a.nbytes)])})
    os.mkfifo(fifo)
    case(name, folder, f"{arch} /{NORM[1]}: its data is stored in the external file '{fifo}'",
         "a tensor's bytes in an external FIFO: refused, not opened (no hang)", args=["--backend", "hdf5"], timeout=60)

    name = "hdf5_virtual_dataset"
    folder = os.path.join(root, name, "archive")
    source = os.path.join(root, name, "source.h5")
    os.makedirs(os.path.dirname(source), exist_ok=True)
    with h5py.File(source, "w") as s:
        s.create_dataset("secret", data=np.frombuffer(SECRET[:32], dtype="<f4"))

    def virtual(f, a):
        layout = h5py.VirtualLayout(shape=a.shape, dtype="<f4")
        layout[:] = h5py.VirtualSource(source, "secret", shape=a.shape)
        return f.create_virtual_dataset(NORM[1], layout)
    arch = write_archive(folder, replace={NORM[1]: virtual})
    case(name, folder, f"{arch} /{NORM[1]}: a virtual dataset (its data mapped from other datasets or files)",
         "a tensor as a virtual dataset over another file", args=["--backend", "hdf5"])

    name = "hdf5_group_external_link_fifo"
    folder = os.path.join(root, name, "archive")
    fifo = os.path.join(root, name, "fifo.h5")

    def linked_group(f, a):
        f["model"] = h5py.ExternalLink(fifo, "/model")
        return None
    arch = write_archive(folder, replace={EMBED[1]: linked_group, NORM[1]: lambda f, a: None})
    os.mkfifo(fifo)
    case(name, folder, f"{arch} /{EMBED[1]}: /model is an external link (to an object in another file); expected "
         "groups and datasets of the archive itself", "the tensors' group is an external link to a FIFO: refused "
         "before it is followed", args=["--backend", "hdf5"], timeout=60)

    name = "hdf5_soft_link_tensor"
    folder = os.path.join(root, name)

    def aliased(f, a):
        f.create_dataset("model/other", data=a)
        f[NORM[1]] = h5py.SoftLink("/model/other")
        return f["model/other"]
    arch = write_archive(folder, replace={NORM[1]: aliased})
    case(name, folder, f"{arch} /{NORM[1]}: /{NORM[1]} is a soft link", "a tensor's dataset path is a soft link to "
         "another dataset", args=["--backend", "hdf5"])


def type_and_allocation_cases(root):
    le = ("4-byte little-endian float (sign at bit 31, 8 exponent bits at 23, bias 127, 23 mantissa bits at 0) "
          "(what vmerge writes for F32)")
    name = "hdf5_big_endian"
    folder = os.path.join(root, name)
    arch = write_archive(folder, replace={NORM[1]: lambda f, a: f.create_dataset(NORM[1], data=a.astype(">f4"))})
    case(name, folder, f"{arch} /{NORM[1]}: stored as 4-byte big-endian float (sign at bit 31, 8 exponent bits at 23, "
         f"bias 127, 23 mantissa bits at 0), expected {le}", "an F32 tensor stored big-endian (HDF5 would swap it)",
         args=["--backend", "hdf5"])

    name = "hdf5_integer_for_float"
    folder = os.path.join(root, name)
    arch = write_archive(folder, replace={NORM[1]: lambda f, a: f.create_dataset(NORM[1], data=a.astype("<i4"))})
    case(name, folder, f"{arch} /{NORM[1]}: stored as 4-byte little-endian signed integer, expected {le}",
         "an F32 tensor stored as int32 (HDF5 would convert the numbers)", args=["--backend", "hdf5"])

    name = "hdf5_never_written"
    folder = os.path.join(root, name)
    arch = write_archive(folder, replace={NORM[1]: lambda f, a: f.create_dataset(NORM[1], shape=a.shape, dtype="<f4")})
    case(name, folder, f"{arch} /{NORM[1]}: never written (its storage is not allocated, HDF5 would read fill values); "
         f"expected {8 * 4} stored bytes", "a tensor's dataset created and never written (HDF5 reads zeros)",
         args=["--backend", "hdf5"])

    name = "hdf5_extendible"
    folder = os.path.join(root, name)
    arch = write_archive(folder, f"zstd:{LEVEL}", replace={NORM[1]: lambda f, a: zstd_create(
        f, NORM[1], a.shape, (4,), maxshape=(None,))})
    case(name, folder, f"{arch} /{NORM[1]}: an extendible dataspace (maximum [unlimited]), expected fixed [8]",
         "a tensor's dataspace may grow", args=["--backend", "hdf5"])


def chunk_cases(root):
    zstd = f"zstd:{LEVEL}"
    where = lambda arch, row: f"{arch} /{EMBED[1]}: the chunk at row {row}: "  # noqa: E731

    def damaged(name, notes, error, command="merge", **kw):
        # One rank: a chunk is found bad while it is copied, by the rank that reads it; with two,
        # the other rank's write into the staging folder that the failing rank removed may be
        # the error reported instead (a failure path of the executor, not of the archive).
        folder = os.path.join(root, name)
        arch = write_archive(folder, zstd, replace={EMBED[1]: lambda f, a: zstd_dataset(f, EMBED[1], a, 2, **kw)})
        if command == "verify":
            case(name, "", error(arch), notes, command="verify", target=folder)
        else:
            case(name, folder, error(arch), notes, args=["--backend", "hdf5"], np=1)

    short = frame(bytes(16))
    damaged("hdf5_zstd_short_frame", "a chunk's frame decodes to 16 of its 32 bytes (HDF5 would leave the rest "
            "uninitialised)", lambda a: where(a, 2) + "zstd: the frame records 16 decompressed bytes, expected exactly "
            f"{EMBED_CHUNK_BYTES} (the chunk's size)", frames=[None, short, None])
    damaged("hdf5_verify_zstd_short_frame", "verify finds the short frame too",
            lambda a: where(a, 2) + "zstd: the frame records 16 decompressed bytes", command="verify",
            frames=[None, short, None])
    damaged("hdf5_zstd_frame_claims_1gib", "a chunk's frame header claims 1 GiB: refused before anything is "
            "allocated", lambda a: where(a, 0) + f"zstd: the frame records {1 << 30} decompressed bytes, expected "
            f"exactly {EMBED_CHUNK_BYTES}", frames=[frame_claiming(1 << 30), None, None])
    damaged("hdf5_zstd_two_frames", "a chunk holds its frame and a second one after it",
            lambda a: where(a, 4) + "zstd: the stored bytes hold a frame of",
            frames=[None, None, frame(bytes(EMBED_CHUNK_BYTES)) + frame(bytes(8))])
    damaged("hdf5_zstd_missing_chunk", "the last chunk never written (HDF5 reads fill values)",
            lambda a: f"{a} /{EMBED[1]}: 2 of its 3 chunks stored (the others never written, HDF5 would read fill "
            "values); expected all", frames=[None, None])
    damaged("hdf5_zstd_filter_skipped", "a chunk stored with the filter mask saying zstd was skipped",
            lambda a: where(a, 0) + "stored with the zstd filter skipped (filter mask 1); expected a zstd frame",
            frames=[values((2, 4), 0).tobytes(), None, None], mask=1)
    damaged("hdf5_chunks_not_whole_rows", "chunks of half rows",
            lambda a: f"{a} /{EMBED[1]}: chunks of [2, 2] in a dataspace of [6, 4]; expected chunks of whole rows",
            chunks=(2, 2), frames=[])
    damaged("hdf5_zstd_filter_optional", "the zstd filter optional (h5py's default for filters it does not "
            "know): HDF5 may then store chunks raw", lambda a: f"{a} /{EMBED[1]}: the zstd filter is optional (chunks "
            f"may be stored raw); expected exactly the zstd filter {ZSTD} at level {LEVEL}", optional=True)
    damaged("hdf5_two_filters", "shuffle before zstd", lambda a: f"{a} /{EMBED[1]}: 2 filters; expected exactly the "
            f"zstd filter {ZSTD} at level {LEVEL}", filters=("shuffle",), frames=[])

    name = "hdf5_chunked_in_uncompressed_archive"
    folder = os.path.join(root, name)
    arch = write_archive(folder, "none", replace={EMBED[1]: lambda f, a: zstd_dataset(f, EMBED[1], a, 2)})
    case(name, folder, f"{arch} /{EMBED[1]}: chunked, in an archive whose compression is none", "a zstd dataset "
         "in an archive whose root says compression none", args=["--backend", "hdf5"])


def file_cases(root):
    name = "hdf5_file_named_like_weights"
    folder = os.path.join(root, name)
    arch = write_archive(folder, files={"config.json": CONFIG.encode(), "model.safetensors": b"\x08" + bytes(15)})
    case(name, folder, f"{arch} /hf_files/model.safetensors: 'model.safetensors' is the name of a weight file",
         "an HF file in the archive named model.safetensors must not replace the converted weights",
         args=["--backend", "hdf5"])

    name = "hdf5_file_external_link"
    folder = os.path.join(root, name, "archive")
    fifo = os.path.join(root, name, "fifo.h5")
    arch = write_archive(folder)
    with h5py.File(arch, "a") as f:
        f["hf_files/tokenizer.json"] = h5py.ExternalLink(fifo, "/secret")
    os.mkfifo(fifo)
    case(name, folder, f"{arch} /hf_files/tokenizer.json: an external link (to an object in another file); expected "
         "the file's bytes as a dataset in the archive", "an HF file that is an external link to a FIFO",
         args=["--backend", "hdf5"], timeout=60)
