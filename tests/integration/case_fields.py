#!/usr/bin/python3
"""Prints one fixture case of a generator's cases.json as shell assignments, for `eval` in the
case scripts: local_dir, hf_config, reference, base_reference, mode (LoRA: extract|merge),
merge_args (an array) and expected_error (empty unless the case must fail).

    case_fields.py CASES_JSON CASE
"""
import json
import shlex
import sys

path, name = sys.argv[1], sys.argv[2]
with open(path) as f:
    c = json.load(f)[name]
fields = {
    "local_dir": c.get("local_dir", name),
    "hf_config": c.get("hf_config") or "",
    "reference": c.get("reference", name + ".reference") or "",
    "base_reference": c.get("base_reference") or "",
    "mode": c.get("lora") or "",
    "expected_error": (c.get("expect") or {}).get("error") or "",
}
for key, value in fields.items():
    print("%s=%s" % (key, shlex.quote(value)))
print("merge_args=(" + " ".join(shlex.quote(a) for a in c.get("merge_args", [])) + ")")
