"""vmerge: merge sharded training checkpoints into Hugging Face folders, from Python.

The five commands of vmerge-mpi as functions: merge(), test(), inspect(), verify(), watch().
Keyword arguments are the command's flags by name (docs/usage.md): merge(local_dir=...,
target_dir=..., max_shard_size="5GB", dtype="bf16", resume=True). A failure raises MergeError
with the message the command prints. docs/python.md has the calls and an example.

The binding is ctypes over libvmerge's C interface (include/vmerge/vmerge.h): that interface is
a stable C ABI with JSON in and out, so the binding needs no compiled extension of its own, no
binding library at build or run time, and one wheel's libvmerge.so serves every Python version.
"""
import ctypes
import json
import os

__all__ = ["merge", "test", "inspect", "verify", "watch", "MergeError", "version"]


class MergeError(Exception):
    """A vmerge failure: str() is the message vmerge-mpi prints; exit_code is 1 (an error) or 2
    (a usage error: a flag it does not take, a bad value)."""

    def __init__(self, message, exit_code):
        super().__init__(message)
        self.exit_code = exit_code


_PROGRESS = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p)


def _library_path():
    """VMERGE_LIBRARY (a build tree's libvmerge.so) or the one installed beside this module."""
    explicit = os.environ.get("VMERGE_LIBRARY")
    if explicit:
        return explicit
    here = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(here)):
        if name.startswith("libvmerge.so"):
            return os.path.join(here, name)
    raise ImportError("vmerge: no libvmerge.so beside %s (pip install the package, or set VMERGE_LIBRARY)" % here)


def _load():
    lib = ctypes.CDLL(_library_path())
    lib.vmerge_run.argtypes = [ctypes.c_char_p, ctypes.c_char_p, _PROGRESS, ctypes.c_void_p,
                               ctypes.POINTER(ctypes.c_void_p)]
    lib.vmerge_run.restype = ctypes.c_int
    for name in ("vmerge_result_error", "vmerge_result_json", "vmerge_result_output"):
        getattr(lib, name).argtypes = [ctypes.c_void_p]
        getattr(lib, name).restype = ctypes.c_char_p
    lib.vmerge_result_exit_code.argtypes = [ctypes.c_void_p]
    lib.vmerge_result_exit_code.restype = ctypes.c_int
    lib.vmerge_result_free.argtypes = [ctypes.c_void_p]
    lib.vmerge_result_free.restype = None
    lib.vmerge_version.restype = ctypes.c_char_p
    return lib


_lib = _load()


def version():
    return _lib.vmerge_version().decode()


def _flags(kwargs):
    """Keyword arguments as the C interface's options: None leaves a flag out, a path is text."""
    flags = {}
    for name, value in kwargs.items():
        if value is None:
            continue
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        elif isinstance(value, (list, tuple)):
            value = [os.fspath(v) if isinstance(v, os.PathLike) else v for v in value]
        flags[name] = value
    return flags


class _TqdmBar:
    """tqdm's bar over the bytes written, when tqdm is installed."""

    def __init__(self, tqdm, description):
        self._tqdm = tqdm
        self._description = description
        self._bar = None

    def __call__(self, done, total):
        if self._bar is None:
            self._bar = self._tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024,
                                   desc=self._description)
        self._bar.update(done - self._bar.n)

    def close(self):
        if self._bar is not None:
            self._bar.close()


def _progress_callable(progress, description):
    """progress: a callable(done, total) (returning False cancels), True or "auto" for tqdm's bar
    (auto: when tqdm is installed), False or None for none. Returns (callable or None, closer)."""
    if callable(progress):
        return progress, None
    if progress is False or progress is None:
        return None, None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        if progress is True:
            raise
        return None, None
    bar = _TqdmBar(tqdm, description)
    return bar, bar


def _run(command, kwargs, progress=None):
    options = json.dumps(_flags(kwargs)).encode()
    callback, closer = _progress_callable(progress, command) if progress is not None else (None, None)
    raised = []

    def on_progress(done, total, _user):
        try:
            return 0 if callback(done, total) is not False else 1
        except BaseException as e:  # noqa: B902 - KeyboardInterrupt too: cancel, re-raised below
            raised.append(e)
            return 1

    c_callback = _PROGRESS(on_progress) if callback else _PROGRESS()
    result = ctypes.c_void_p()
    try:
        code = _lib.vmerge_run(command.encode(), options, c_callback, None, ctypes.byref(result))
    finally:
        if closer:
            closer.close()
    try:
        error = _lib.vmerge_result_error(result).decode()
        document = json.loads(_lib.vmerge_result_json(result).decode())
        output = _lib.vmerge_result_output(result).decode()
    finally:
        _lib.vmerge_result_free(result)
    if raised:
        raise raised[0]
    if error:
        raise MergeError(error, code)
    return code, document, output


def merge(local_dir=None, target_dir=None, *, progress="auto", **flags):
    """Merges a checkpoint into a Hugging Face folder (vmerge-mpi merge). Returns the --log_json
    document as a dict. progress: "auto" (tqdm's bar when tqdm is installed), True, False, or a
    callable(done_bytes, total_bytes) whose False cancels the merge: it then raises MergeError,
    leaves no target and keeps the staging folder, which merge(..., resume=True) continues."""
    return _run("merge", dict(local_dir=local_dir, target_dir=target_dir, **flags), progress)[1]


def _checked(command, flags):
    code, _, output = _run(command, flags)
    return {"ok": code == 0, "exit_code": code, "output": output}


def test(local_dir=None, test_hf_dir=None, **flags):
    """Compares a checkpoint with a Hugging Face folder, writing nothing (vmerge-mpi test):
    {"ok": bool, "exit_code": 0 or 1, "output": the report}."""
    return _checked("test", dict(local_dir=local_dir, test_hf_dir=test_hf_dir, **flags))


def inspect(local_dir=None, **flags):
    """What vmerge detects and plans (vmerge-mpi inspect): the inspect --json document as a dict."""
    return _run("inspect", dict(local_dir=local_dir, **flags))[1]


def verify(target_dir=None, **flags):
    """Checks a merged folder (vmerge-mpi verify): {"ok": bool, "exit_code": 0 or 1, "output": ...}."""
    return _checked("verify", dict(target_dir=target_dir, **flags))


def watch(root=None, target_root=None, *, progress=None, **flags):
    """Merges every finished step of a training run (vmerge-mpi watch); returns the last merge's
    --log_json document ({} when none ran)."""
    return _run("watch", dict(root=root, target_root=target_root, **flags), progress)[1]
