"""Helpers the corpus case modules share: the case registry, folder copies, and hand patching
of ZIP and pickle bytes (standard library only)."""
import os
import pickletools
import shutil
import struct
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES_SRC = os.path.join(os.path.dirname(HERE), "fixtures")

CASES = {}


MODULE = [None]  # the case module now adding cases: its ctest runs them


def case(name, local_dir, error, notes, args=(), command="merge", exit=1, target=None, np=2,
         timeout=120, output=(), unchanged=(), target_has=(), target_lacks=(), env=None):
    """A case: `command` on `local_dir` with `args` must exit with `exit`; on failure with one
    "error:" line holding every `error` text, on success with every `output` text. `target`
    (default: a fresh folder beside the case) is the --target_dir; the case folder and the
    target's parent must be byte-identical before and after a failed run. Whatever the exit,
    the `unchanged` folders stay byte-identical, and the target holds every `target_has` name
    (as a regular file) and none of `target_lacks`. `env`: variables added to the run's."""
    assert name not in CASES, name
    CASES[name] = {"module": MODULE[0], "local_dir": os.path.abspath(local_dir) if local_dir else "",
                   "args": list(args), "error": error if isinstance(error, list) else [error],
                   "notes": notes, "command": command, "exit": exit,
                   "target": os.path.abspath(target) if target else None, "np": np,
                   "timeout": timeout, "output": list(output),
                   "unchanged": [os.path.abspath(u) for u in unchanged],
                   "target_has": list(target_has), "target_lacks": list(target_lacks), "env": dict(env or {})}


# ---------------------------------------------------------------------------------------------
# ZIP helpers
# ---------------------------------------------------------------------------------------------

def zip_layout(path):
    """(file size, EOCD offset, ZIP64 locator offset or None, central directory offset, size)."""
    data = open(path, "rb").read()
    eocd = data.rfind(b"PK\x05\x06")
    assert eocd >= 0, path
    cd_size, cd_offset = struct.unpack_from("<II", data, eocd + 12)
    locator = eocd - 20 if data[eocd - 20:eocd - 16] == b"PK\x06\x07" else None
    if locator is not None:
        zip64 = struct.unpack_from("<Q", data, locator + 8)[0]
        assert data[zip64:zip64 + 4] == b"PK\x06\x06"
        cd_size, cd_offset = struct.unpack_from("<QQ", data, zip64 + 40)
    return len(data), eocd, locator, cd_offset, cd_size


def rewrite_zip(path, replace=None, deflate=()):
    """Rewrites a torch archive record by record (stored, or deflated for names in `deflate`);
    `replace` maps a record name to its new bytes."""
    replace = replace or {}
    with zipfile.ZipFile(path) as z:
        records = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    os.remove(path)
    with zipfile.ZipFile(path, "w") as z:
        for name, data in records:
            method = zipfile.ZIP_DEFLATED if name in deflate else zipfile.ZIP_STORED
            z.writestr(zipfile.ZipInfo(name), replace.get(name, data), compress_type=method)


def record_name(path, suffix):
    with zipfile.ZipFile(path) as z:
        return next(n for n in z.namelist() if n.endswith(suffix))


def read_record(path, suffix):
    with zipfile.ZipFile(path) as z:
        return z.read(record_name(path, suffix))


# ---------------------------------------------------------------------------------------------
# Pickle helpers: ops with byte positions; a change splices new bytes for one op (protocol 2
# pickles as torch writes them have no FRAME, so lengths may change freely).
# ---------------------------------------------------------------------------------------------

def ops_of(pkl):
    ops = list(pickletools.genops(pkl))
    out = []
    for i, (op, arg, pos) in enumerate(ops):
        end = ops[i + 1][2] if i + 1 < len(ops) else len(pkl)
        out.append((op.name, arg, pos, end))
    return out


def splice(pkl, op, new_bytes):
    _, _, pos, end = op
    return pkl[:pos] + new_bytes + pkl[end:]


def int_op(value):
    if 0 <= value < 256:
        return b"K" + bytes([value])
    if -2**31 <= value < 2**31:
        return b"J" + struct.pack("<i", value)
    # LONG1: the shortest two's-complement bytes that keep the sign (pickle's encode_long).
    n = (value.bit_length() + 8) // 8
    raw = value.to_bytes(n, "little", signed=True)
    if len(raw) > 1 and ((raw[-1] == 0 and raw[-2] < 0x80) or (raw[-1] == 0xFF and raw[-2] >= 0x80)):
        raw = raw[:-1]
    return b"\x8a" + bytes([len(raw)]) + raw


def first_dense_tensor(ops):
    """The ops of the first _rebuild_tensor_v2 call: (persid tuple ints, offset op, size ops,
    stride ops). Layout: GLOBAL, BINPUT, MARK, persid..., BINPERSID, offset, size..., TUPLEn,
    BINPUT, stride..., TUPLEn."""
    g = next(i for i, o in enumerate(ops)
             if o[0] == "GLOBAL" and o[1] == "torch._utils _rebuild_tensor_v2")
    p = next(i for i in range(g, len(ops)) if ops[i][0] == "BINPERSID")
    numel_op = ops[p - 3]  # ..., numel, TUPLE, BINPUT, BINPERSID
    assert numel_op[0].startswith("BININT"), numel_op
    i = p + 1
    offset = ops[i]
    i += 1
    size = []
    while ops[i][0].startswith("BININT"):
        size.append(ops[i])
        i += 1
    assert ops[i][0].startswith("TUPLE") and ops[i + 1][0].startswith("BINPUT"), ops[i]
    i += 2
    stride = []
    while ops[i][0].startswith("BININT"):
        stride.append(ops[i])
        i += 1
    return numel_op, offset, size, stride


def storage_key_of_first_tensor(ops):
    g = next(i for i, o in enumerate(ops)
             if o[0] == "GLOBAL" and o[1] == "torch._utils _rebuild_tensor_v2")
    p = next(i for i in range(g, len(ops)) if ops[i][0] == "BINPERSID")
    return ops[p - 7][1]  # MARK 'storage' BINPUT class BINPUT key BINPUT location BINPUT numel


def patch_data_pkl(path, change):
    name = record_name(path, "/data.pkl")
    with zipfile.ZipFile(path) as z:
        pkl = z.read(name)
    rewrite_zip(path, replace={name: change(pkl)})



def copy_case(src, dst):
    shutil.copytree(src, dst, symlinks=False)
    return dst
