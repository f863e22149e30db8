"""Bench-size checkpoints written by the real libraries, for bench_real_peers.sh.

    torchrun --standalone --nproc_per_node=2 make_real_bench_checkpoints.py fsdp OUT_DIR
    torchrun --standalone --nproc_per_node=2 make_real_bench_checkpoints.py deepspeed OUT_DIR

fsdp       a verl FSDP2 actor saved as verl's FSDPCheckpointManager saves it (torch's fully_shard,
           then torch.save(model.state_dict()) per rank): OUT_DIR/global_step_1/actor/
           model_/optim_/extra_state_world_size_2_rank_R.pt, fsdp_config.json, huggingface/.
           Qwen2, hidden 2048, 16 layers, vocab 32000, untied, bf16 parameters: 1.71 GB.
deepspeed  DeepSpeedEngine.save_checkpoint of a ZeRO-3 bf16 engine after one training step (so
           the fp32 masters and Adam moments exist), in HF Trainer's checkpoint-N layout:
           OUT_DIR/checkpoint-1/{latest, zero_to_fp32.py, global_step1/, config.json, tokenizer}.
           Qwen2, hidden 2048, 8 layers, vocab 32000, tied: 0.43 G parameters, 1.70 GB of fp32
           masters, about 5 GB on disk with the moments (sized for a 23 GiB, 2-core machine).

Random weights: the benchmark times reading and writing bytes, not what they mean. The tokenizer
is eco_common's small local one (verl's merger needs one; its vocabulary size does not matter).
"""
import os
import sys

# DeepSpeed picks its accelerator at import time; LOCAL_SIZE is its CPU "device count".
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("LOCAL_SIZE", os.environ.get("LOCAL_WORLD_SIZE", "1"))
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "ecosystem"))
import eco_common as E  # noqa: E402
import gen_fsdp2  # noqa: E402

SIZES = {"fsdp": dict(layers=16, tie=False), "deepspeed": dict(layers=8, tie=True)}


def bench_config(layers, tie):
    """A Qwen2 config of bench size (the shapes of the repo's other FSDP benchmarks)."""
    from transformers import Qwen2Config
    cfg = Qwen2Config(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                      num_hidden_layers=layers, num_attention_heads=16, num_key_value_heads=4,
                      max_position_embeddings=4096, tie_word_embeddings=tie,
                      bos_token_id=1, eos_token_id=2)
    cfg.dtype = "bfloat16"
    cfg.architectures = ["Qwen2ForCausalLM"]
    return cfg


def bf16_model(cfg):
    """The model straight in bf16 with the library's own random init; same seed on every rank,
    as a real run loads the same weights everywhere."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(1234)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)


def save_fsdp(out_dir, rank, world):
    """fully_shard per decoder layer then the root (verl's FSDP2 wrapping), verl's file names."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    cfg = bench_config(**SIZES["fsdp"])
    model = bf16_model(cfg)
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("fsdp",))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    actor = os.path.join(out_dir, "global_step_1", "actor")
    os.makedirs(actor, exist_ok=True)
    gen_fsdp2.write_verl_files(actor, model, rank, world, cfg)  # verl's file set, as the tests write it


def ds_config(hidden_size):
    """bf16 ZeRO-3 with HF Trainer's "auto" persistence threshold (norms stay gathered)."""
    return {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
            "zero_allow_untested_optimizer": True, "steps_per_print": 1000000,
            "bf16": {"enabled": True},
            "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 10 * hidden_size}}


def save_deepspeed(out_dir, rank):
    """One forward/backward/step so the masters and moments exist, then save_checkpoint."""
    import deepspeed
    cfg = bench_config(**SIZES["deepspeed"])
    model = bf16_model(cfg).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=ds_config(cfg.hidden_size))
    ids = torch.tensor(E.FIXED_INPUT)
    engine.backward(engine(input_ids=ids, labels=ids).loss)
    engine.step()
    ckpt_dir = os.path.join(out_dir, "checkpoint-1")
    engine.save_checkpoint(ckpt_dir, tag="global_step1")   # collective: every rank writes its files
    if rank == 0:
        E.save_hf_files(cfg, ckpt_dir)   # HF Trainer's save_model: config and tokenizer beside latest


def main():
    kind, out_dir = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    if kind == "deepspeed":
        import deepspeed
        deepspeed.init_distributed(dist_backend="gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        save_deepspeed(out_dir, rank)
    else:
        rank, world = E.init_gloo()
        save_fsdp(out_dir, rank, world)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
