"""Damaged copies of the real torchao float8 DCP save (case dcp_torchao_fp8_mixed, gen_torchao_fp8.py)
must be refused with one error naming the item's key and what was expected, exit code 1 and no
target left (docs/quantization.md, "FP8 weights in DCP saves"):

  unknown subclass  the first item's class renamed (Float8Tensor -> Float9Tensor): a tensor subclass
                    vmerge does not read
  missing scale     the first item's 'scale' slot renamed ('scale' -> 'scald'): a Float8Tensor without
                    its scale

Each patch keeps every length, and the ZIP record's CRC-32 is rewritten, so the file is a sound
torch.save item that says something else.

    torchao_fp8_refusals.py CASE_DIR --vmerge BIN --work DIR
"""
import argparse
import io
import os
import shutil
import struct
import subprocess
import sys
import zipfile
import zlib

import torch.distributed.checkpoint as dcp

PATCHES = {
    "unknown_subclass": (b"torchao.quantization\nFloat8Tensor\n", b"torchao.quantization\nFloat9Tensor\n",
                         "unsupported tensor subclass torchao.quantization.Float9Tensor"),
    "missing_scale": (b"X\x05\x00\x00\x00scale", b"X\x05\x00\x00\x00scald", "a torchao Float8Tensor without its 'scale'"),
}


def first_float8_item(ckpt):
    """(fqn, file, offset, length) of the first Float8Tensor item in .metadata order."""
    meta = dcp.FileSystemReader(ckpt).read_metadata()
    for index, info in meta.storage_data.items():
        with open(os.path.join(ckpt, info.relative_path), "rb") as f:
            f.seek(info.offset)
            if b"Float8Tensor" in f.read(info.length):
                return index.fqn, os.path.join(ckpt, info.relative_path), info.offset, info.length
    raise SystemExit(f"{ckpt}: no torchao Float8Tensor item")


def patch_item(path, offset, length, old, new):
    """Replaces `old` by `new` in the item's data.pkl and rewrites that record's CRC-32 where the
    local header keeps it (or its data descriptor) and in its central directory entry."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    item = bytes(data[offset:offset + length])
    archive = zipfile.ZipFile(io.BytesIO(item))
    record = next(i for i in archive.infolist() if i.filename.endswith("data.pkl"))
    assert record.compress_type == zipfile.ZIP_STORED
    name_len, extra_len = struct.unpack("<HH", item[record.header_offset + 26:record.header_offset + 30])
    start = offset + record.header_offset + 30 + name_len + extra_len
    pickle_bytes = bytes(data[start:start + record.file_size])
    assert pickle_bytes.count(old) == 1, (old, pickle_bytes.count(old))
    pickle_bytes = pickle_bytes.replace(old, new)
    data[start:start + record.file_size] = pickle_bytes
    crc = struct.pack("<I", zlib.crc32(pickle_bytes))
    header = offset + record.header_offset
    if struct.unpack("<H", item[record.header_offset + 6:record.header_offset + 8])[0] & 8:
        # torch.save streams its records: the CRC follows the data, in a data descriptor.
        end = start + record.file_size
        at = end + 4 if data[end:end + 4] == b"PK\x07\x08" else end
        data[at:at + 4] = crc
    else:
        data[header + 14:header + 18] = crc
    central = item.find(b"PK\x01\x02")
    while central >= 0:
        n = struct.unpack("<H", item[central + 28:central + 30])[0]
        if item[central + 46:central + 46 + n] == record.filename.encode():
            data[offset + central + 16:offset + central + 20] = crc
            break
        central = item.find(b"PK\x01\x02", central + 4)
    else:
        raise SystemExit("data.pkl has no central directory entry")
    with open(path, "wb") as f:
        f.write(data)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("case")
    parser.add_argument("--vmerge", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    for name, (old, new, expected) in PATCHES.items():
        work = os.path.join(args.work, f"torchao_fp8_refusals.{name}")
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(os.path.join(args.case, "ckpt"), os.path.join(work, "ckpt"))
        fqn, path, offset, length = first_float8_item(os.path.join(work, "ckpt"))
        patch_item(path, offset, length, old, new)
        target = os.path.join(work, "out")
        cmd = [args.vmerge, "merge", "--backend", "dcp", "--local_dir", os.path.join(work, "ckpt"), "--target_dir",
               target, "--hf_config", os.path.join(args.case, "hf_config"), "--quiet"]
        result = subprocess.run(cmd, capture_output=True, text=True)
        message = result.stderr.strip()
        if result.returncode != 1 or expected not in message or f"'{fqn}'" not in message or os.path.exists(target):
            sys.exit(f"{name}: expected exit code 1, an error naming '{fqn}' and saying '{expected}', and no "
                     f"{target}; got exit code {result.returncode}: {message}")
        print(f"ok: {name}: {message}", flush=True)
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
