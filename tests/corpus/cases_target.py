"""Corpus cases of the target and the files beside it: links in huggingface/ that lead out, a
target that is, holds or lies inside the checkpoint, --force over files vmerge did not write,
staging folders and locks that are not this merge's."""
import json
import os
import socket

from corpus_lib import case, copy_case

SECRET = '{"outside": "the user\'s file, never to be copied or overwritten"}\n'


def checkpoint_with_outside(good_fsdp, out, name):
    """out/name/ckpt: the w2_bf16 checkpoint; out/name/outside/: a folder of the user's."""
    root = os.path.join(out, name)
    ckpt = copy_case(os.path.join(good_fsdp, "w2_bf16"), os.path.join(root, "ckpt"))
    os.makedirs(os.path.join(root, "outside"))
    with open(os.path.join(root, "outside", "secret.json"), "w") as f:
        f.write(SECRET)
    return root, ckpt


def write_fake_output(folder, files, listed):
    """A folder that looks like an earlier vmerge output: `files` plus a manifest of `listed`."""
    os.makedirs(folder)
    for name in files:
        with open(os.path.join(folder, name), "w") as f:
            f.write("x")
    with open(os.path.join(folder, "vmerge.manifest.json"), "w") as f:
        json.dump({"written_by": "vmerge-mpi", "files": sorted(listed + ["vmerge.manifest.json"])}, f)


def add_cases(good_fsdp, good_megatron, out):
    hf_link_cases(good_fsdp, out)
    placement_cases(good_fsdp, out)
    existing_target_cases(good_fsdp, out)
    staging_and_lock_cases(good_fsdp, out)


def hf_link_cases(good_fsdp, out):
    root, ckpt = checkpoint_with_outside(good_fsdp, out, "hf_link_to_outside_file")
    outside = os.path.join(root, "outside")
    os.symlink(os.path.join(outside, "secret.json"), os.path.join(ckpt, "huggingface", "added_tokens.json"))
    case("hf_link_to_outside_file", ckpt, [], "huggingface/added_tokens.json links to a file outside the folder",
         exit=0, output=[f"not copied from {ckpt}/huggingface: added_tokens.json: a link that leads outside"],
         unchanged=[outside], target_has=["config.json", "tokenizer.json"], target_lacks=["added_tokens.json"])

    root, ckpt = checkpoint_with_outside(good_fsdp, out, "hf_link_to_outside_folder")
    outside = os.path.join(root, "outside")
    os.symlink(outside, os.path.join(ckpt, "huggingface", "extra"))
    case("hf_link_to_outside_folder", ckpt, [], "huggingface/extra links to a folder outside (its files must not come in, "
         "nothing may be written through it)", exit=0,
         output=[f"not copied from {ckpt}/huggingface: extra: a link that leads outside"],
         unchanged=[outside], target_lacks=["extra", "extra/secret.json"])

    root, ckpt = checkpoint_with_outside(good_fsdp, out, "hf_link_inside_is_copied")
    os.symlink("tokenizer.json", os.path.join(ckpt, "huggingface", "tokenizer_alias.json"))
    case("hf_link_inside_is_copied", ckpt, [], "a link to a file inside huggingface/ is copied as a regular file",
         exit=0, output=["vmerge: merged"], target_has=["tokenizer_alias.json"])

    root, ckpt = checkpoint_with_outside(good_fsdp, out, "hf_dangling_link")
    os.symlink(os.path.join(root, "nowhere.json"), os.path.join(ckpt, "huggingface", "chat_template.json"))
    case("hf_dangling_link", ckpt, [], "huggingface/chat_template.json links to nothing", exit=0,
         output=["chat_template.json: a link to nothing"], target_lacks=["chat_template.json"])



def placement_cases(good_fsdp, out):
    _, ckpt = checkpoint_with_outside(good_fsdp, out, "target_is_the_checkpoint")
    case("target_is_the_checkpoint", ckpt, f"--target_dir {ckpt} is the checkpoint (--local_dir) {ckpt}",
         "--target_dir equal to --local_dir, with --force", args=["--force"], target=ckpt)

    root, ckpt = checkpoint_with_outside(good_fsdp, out, "target_contains_the_checkpoint")
    case("target_contains_the_checkpoint", ckpt, f"--target_dir {root} contains the checkpoint (--local_dir) {ckpt}",
         "--target_dir is the checkpoint's parent, with --force", args=["--force"], target=root)

    _, ckpt = checkpoint_with_outside(good_fsdp, out, "target_inside_the_checkpoint")
    inner = os.path.join(ckpt, "merged")
    case("target_inside_the_checkpoint", ckpt, f"--target_dir {inner} lies inside the checkpoint (--local_dir) {ckpt}",
         "--target_dir below --local_dir", target=inner)

    root, ckpt = checkpoint_with_outside(good_fsdp, out, "target_link_to_the_checkpoint")
    link = os.path.join(root, "link")
    os.symlink(ckpt, link)
    case("target_link_to_the_checkpoint", ckpt, f"--target_dir {link} is the checkpoint (--local_dir) {ckpt}",
         "--target_dir is a link to the checkpoint, with --force", args=["--force"], target=link)

    root, ckpt = checkpoint_with_outside(good_fsdp, out, "target_inside_hf_config")
    hf = copy_case(os.path.join(ckpt, "huggingface"), os.path.join(root, "hf"))
    inner = os.path.join(hf, "out")
    case("target_inside_hf_config", ckpt, f"--target_dir {inner} lies inside the config folder (--hf_config) {hf}",
         "--target_dir inside the --hf_config folder", args=["--hf_config", hf], target=inner)


def existing_target_cases(good_fsdp, out):
    root, ckpt = checkpoint_with_outside(good_fsdp, out, "force_over_unrelated_files")
    target = os.path.join(root, "outside")
    case("force_over_unrelated_files", ckpt,
         [f"{target}: exists and is not replaceable: it holds files and no vmerge.manifest.json (it is not a vmerge "
          "output): secret.json", "--force replaces only an empty folder or an earlier vmerge output"],
         "--force onto a folder of the user's files", args=["--force"], target=target)

    root, ckpt = checkpoint_with_outside(good_fsdp, out, "force_over_output_with_user_file")
    target = os.path.join(root, "earlier")
    write_fake_output(target, ["model.safetensors", "README.md"], ["model.safetensors"])
    case("force_over_output_with_user_file", ckpt,
         f"{target}: exists and is not replaceable: it holds files vmerge did not write (not in its "
         "vmerge.manifest.json): README.md", "an earlier output to which the user added README.md, with --force",
         args=["--force"], target=target)

    root, ckpt = checkpoint_with_outside(good_fsdp, out, "force_over_earlier_output")
    target = os.path.join(root, "earlier")
    write_fake_output(target, ["model.safetensors", "config.json"], ["model.safetensors", "config.json"])
    case("force_over_earlier_output", ckpt, [], "--force replaces an earlier vmerge output (every file in its manifest)",
         args=["--force"], target=target, exit=0, output=["vmerge: merged"], target_has=["tokenizer.json"])

    root, ckpt = checkpoint_with_outside(good_fsdp, out, "earlier_output_without_force")
    target = os.path.join(root, "earlier")
    write_fake_output(target, ["model.safetensors"], ["model.safetensors"])
    case("earlier_output_without_force", ckpt,
         f"{target}: already exists (an earlier vmerge output); pass --force to replace it",
         "an earlier output, no --force", target=target)

    root, ckpt = checkpoint_with_outside(good_fsdp, out, "target_is_a_file")
    target = os.path.join(root, "outside", "secret.json")
    case("target_is_a_file", ckpt, f"{target}: exists and is not replaceable: it is not a folder",
         "--target_dir names a regular file, with --force", args=["--force"], target=target)

    root, ckpt = checkpoint_with_outside(good_fsdp, out, "target_is_a_link")
    target = os.path.join(root, "link")
    os.makedirs(os.path.join(root, "empty"))
    os.symlink(os.path.join(root, "empty"), target)
    case("target_is_a_link", ckpt, f"{target}: exists and is not replaceable: it is a symbolic link",
         "--target_dir is a link to an empty folder, with --force", args=["--force"], target=target)

    root, ckpt = checkpoint_with_outside(good_fsdp, out, "empty_target_is_filled")
    target = os.path.join(root, "empty")
    os.makedirs(target)
    case("empty_target_is_filled", ckpt, [], "an existing empty folder is a target without --force (as verl)", exit=0,
         target=target, output=["vmerge: merged"], target_has=["model.safetensors", "vmerge.manifest.json"])


def staging_and_lock_cases(good_fsdp, out):
    root, ckpt = checkpoint_with_outside(good_fsdp, out, "staging_not_made_by_vmerge")
    target = os.path.join(root, "out")
    staging = os.path.join(root, ".out.vmerge-staging")
    os.makedirs(staging)
    with open(os.path.join(staging, "notes.txt"), "w") as f:
        f.write("the user's\n")
    case("staging_not_made_by_vmerge", ckpt,
         f"{staging}: exists and was not made by vmerge (no {staging}/.vmerge-journal); move it away",
         "a folder of the user's at the staging path", target=target)

    host = socket.gethostname()
    root, ckpt = checkpoint_with_outside(good_fsdp, out, "lock_held_by_a_live_merge")
    target = os.path.join(root, "out")
    lock = os.path.join(root, ".out.vmerge-lock")
    with open(lock, "w") as f:
        f.write(f"{host} 1 1764580000\n")  # pid 1 is always alive
    case("lock_held_by_a_live_merge", ckpt,
         f"{target}: another merge into this target is running (lock {lock} held by host and pid {host} 1)",
         "the target's lock names a live process on this host", target=target)

    root, ckpt = checkpoint_with_outside(good_fsdp, out, "lock_on_another_host")
    target = os.path.join(root, "out")
    lock = os.path.join(root, ".out.vmerge-lock")
    with open(lock, "w") as f:
        f.write("some-other-node-17 4242 1764580000\n")
    case("lock_on_another_host", ckpt,
         f"{target}: another merge into this target is running (lock {lock} held by host and pid some-other-node-17 4242)",
         "the target's lock names a process on another host (cannot be checked: kept)", target=target)

    root, ckpt = checkpoint_with_outside(good_fsdp, out, "stale_lock_taken_over")
    target = os.path.join(root, "out")
    dead = 4194303  # above the default pid_max: no such process
    assert not os.path.exists(f"/proc/{dead}")
    with open(os.path.join(root, ".out.vmerge-lock"), "w") as f:
        f.write(f"{host} {dead} 1764580000\n")
    case("stale_lock_taken_over", ckpt, [], "a lock left by a killed merge on this host is taken over", exit=0,
         target=target, output=["vmerge: merged"], target_has=["model.safetensors"])
