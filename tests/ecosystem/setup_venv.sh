#!/bin/bash
# Makes, or reuses when its requirements have not changed, a virtual environment of the
# ecosystem tests under build/, and prints its python:
#   setup_venv.sh main [DIR]   DIR default build/eco-venv (requirements.txt + requirements-deepspeed.txt
#                              + requirements-mbridge.txt)
#   setup_venv.sh verl [DIR]   DIR default build/eco-verl-venv (requirements-verl.txt: verl's own merger)
#   setup_venv.sh s3 [DIR]     DIR default build/s3-venv (requirements-s3.txt: the loopback S3 server; no torch)
#   setup_venv.sh python [DIR] DIR default build/python-venv (requirements-python.txt: pip install . of the
#                              vmerge package, tests/python/; no torch)
# torch==2.13.0 (the CPU build on this machine's disk) goes in first, so that no later package
# resolves torch to a CUDA build of several GB.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
case ${1:-main} in
    main) venv=${2:-$root/build/eco-venv} requirements=(requirements.txt requirements-deepspeed.txt requirements-mbridge.txt) ;;
    verl) venv=${2:-$root/build/eco-verl-venv} requirements=(requirements-verl.txt) ;;
    s3) venv=${2:-$root/build/s3-venv} requirements=(requirements-s3.txt) ;;
    python) venv=${2:-$root/build/python-venv} requirements=(requirements-python.txt) ;;
    *) echo "usage: setup_venv.sh main|verl|s3|python [VENV_DIR]" >&2; exit 2 ;;
esac
python=${VMERGE_ECO_PYTHON:-python3.11}
stamp=$venv/requirements.sha256
wanted=$(cd "$here" && cat "${requirements[@]}" setup_venv.sh | sha256sum | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$wanted" ]]; then
    echo "$venv/bin/python"
    exit 0
fi
rm -rf "$venv"
"$python" -m venv "$venv" >&2
pip=("$venv/bin/pip" install -q --disable-pip-version-check)
[[ ${1:-main} == s3 || ${1:-main} == python ]] || "${pip[@]}" torch==2.13.0 >&2
for file in "${requirements[@]}"; do
    extra=()
    [[ $file == requirements-deepspeed.txt ]] && extra=(--no-build-isolation)
    # mbridge's own requirements would move transformers and megatron-core off their pins.
    [[ $file == requirements-mbridge.txt ]] && extra=(--no-deps)
    # Every package of verl's environment is pinned in its file: no resolution, no downloads of
    # the training stack verl lists but the merger never imports.
    [[ $file == requirements-verl.txt ]] && extra=(--no-deps --no-build-isolation)
    "${pip[@]}" "${extra[@]}" -r "$here/$file" >&2
done
[[ ${1:-main} == s3 || ${1:-main} == python ]] || "$venv/bin/python" -c 'import torch; assert torch.__version__.endswith("+cpu"), torch.__version__' >&2
echo "$wanted" > "$stamp"
echo "$venv/bin/python"
