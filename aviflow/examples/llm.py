"""Fine-tune a causal language model: the recipe after ``make demo``.

A Llama-style ``transformers`` model on every rank of an ``accelerate launch``; sharded with
FSDP2 (``spec.accelerate.strategy: fsdp``) or replicated with DDP (the default), with
gradient accumulation, a data loader sharded across ranks that resumes at the sample where a
checkpoint stopped, periodic eval with perplexity, and checkpoints in torch Distributed
Checkpoint format (each rank writes its own shard), which load on any number of ranks::

    aviflow submit aviflow/examples/llm.yaml        # 2 nodes x 2 processes, FSDP

Where FSDP comes from: with GPUs, accelerate applies ``fully_shard`` (``DistributedType.FSDP``).
Without GPUs accelerate runs the ranks as plain gloo processes (``MULTI_CPU``) and ignores
its FSDP settings, so this script applies torch's ``fully_shard`` itself, with the same
settings (the ``FSDP_*`` variables the preset gives every rank). Either way it prints what
each rank holds (``fsdp2: rank R holds ...``).

By default nothing is downloaded: the model is built from a ``LlamaConfig`` of tiny sizes,
the corpus is made here (:func:`tiny_corpus`) and the tokenizer is built from it
(:func:`corpus_tokenizer`). ``LLM_MODEL`` (a hub id, or a directory such as a shared volume's
model cache) loads a real model and its tokenizer with ``from_pretrained`` instead;
``LLM_CORPUS`` names a UTF-8 text file to train on.

Knobs (env, defaults in brackets): LLM_STEPS [40] optimizer steps; LLM_SEQ [32] tokens per
sample; LLM_MICRO_BATCH [2] samples per rank per forward pass; LLM_GLOBAL_BATCH [16] samples
per optimizer step (gradient accumulation makes up the rest, so a run on fewer ranks
takes the same steps over the same samples); LLM_LR [3e-3] peak learning rate (warmup, then
cosine); LLM_EVAL_EVERY [10], LLM_CKPT_EVERY [10] steps; LLM_EVAL_SAMPLES [16]; LLM_HIDDEN
[64], LLM_LAYERS [2], LLM_HEADS [4] model sizes; LLM_SEED [0]; LLM_STEP_SLEEP [0] seconds
added to each step (to pace a demo or a test that stops a rank mid-run).

Metrics (``aviflow.tracker()``): ``loss``, ``lr``, ``samples`` and ``tokens`` (counted over
all ranks since the run began: tokens/s is their rate), ``eval_loss`` and ``eval_ppl``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

DATA_STATE = "data.json"  # in a checkpoint, beside the DCP shards: where the data loader was


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, str(default)))


@dataclass(frozen=True)
class Config:
    steps: int = 40
    seq: int = 32
    micro_batch: int = 2
    global_batch: int = 16
    lr: float = 3e-3
    eval_every: int = 10
    ckpt_every: int = 10
    eval_samples: int = 16
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    seed: int = 0
    step_sleep: float = 0.0
    model: str | None = None
    corpus: str | None = None

    @classmethod
    def from_env(cls) -> Config:
        return cls(
            steps=_env_int("LLM_STEPS", 40),
            seq=_env_int("LLM_SEQ", 32),
            micro_batch=_env_int("LLM_MICRO_BATCH", 2),
            global_batch=_env_int("LLM_GLOBAL_BATCH", 16),
            lr=float(os.environ.get("LLM_LR", "3e-3")),
            eval_every=_env_int("LLM_EVAL_EVERY", 10),
            ckpt_every=_env_int("LLM_CKPT_EVERY", 10),
            eval_samples=_env_int("LLM_EVAL_SAMPLES", 16),
            hidden=_env_int("LLM_HIDDEN", 64),
            layers=_env_int("LLM_LAYERS", 2),
            heads=_env_int("LLM_HEADS", 4),
            seed=_env_int("LLM_SEED", 0),
            step_sleep=float(os.environ.get("LLM_STEP_SLEEP", "0")),
            model=os.environ.get("LLM_MODEL") or None,
            corpus=os.environ.get("LLM_CORPUS") or None,
        )

    def accumulation(self, world: int) -> int:
        """Forward passes per rank per optimizer step."""
        per_pass = self.micro_batch * world
        if self.global_batch % per_pass:
            raise ValueError(
                f"LLM_GLOBAL_BATCH={self.global_batch} is not a multiple of LLM_MICRO_BATCH x "
                f"ranks = {self.micro_batch} x {world}"
            )
        return self.global_batch // per_pass


# -- data ----------------------------------------------------------------------------------

_WORDS = {
    "det": ["the", "a", "every", "one"],
    "adj": ["small", "quick", "sharded", "patient", "bright", "quiet", "distant", "careful"],
    "noun": ["model", "node", "rank", "gradient", "queue", "notebook", "cluster", "token"],
    "verb": ["trains", "waits for", "sends", "shards", "checks", "follows", "restarts", "reads"],
    "end": [".", "!", "?"],
}


def tiny_corpus(sentences: int = 3000, seed: int = 0) -> str:
    """A corpus made here, deterministic: short sentences of a tiny grammar (learnable in a
    few dozen steps, so a test sees the loss fall)."""
    rng = random.Random(seed)
    out = []
    for _ in range(sentences):
        w = {k: rng.choice(v) for k, v in _WORDS.items()}
        obj = rng.choice(_WORDS["noun"])
        out.append(f"{w['det']} {w['adj']} {w['noun']} {w['verb']} the {obj} {w['end']}")
    return "\n".join(out) + "\n"


def corpus_tokenizer(text: str) -> Any:
    """A word-level ``PreTrainedTokenizerFast`` built from ``text``: ids by frequency, ties by
    spelling, so every rank builds the same one without talking to the others."""
    from collections import Counter

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    counts = Counter(pre.strip() for pre, _ in pre_tokenizers.Whitespace().pre_tokenize_str(text))
    special = ["<unk>", "<eos>"]
    words = sorted(counts, key=lambda w: (-counts[w], w))
    vocab = {w: i for i, w in enumerate([*special, *words])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>"
    )


def blocks(ids: Sequence[int], seq: int) -> torch.Tensor:
    """The token stream cut into samples of ``seq`` tokens (the tail that does not fill one
    is dropped)."""
    n = len(ids) // seq
    if n == 0:
        raise ValueError(f"the corpus has {len(ids)} tokens, fewer than one sample of {seq}")
    return torch.tensor(list(ids[: n * seq]), dtype=torch.long).view(n, seq)


def split(samples: torch.Tensor, eval_samples: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Train and eval samples: the last ``eval_samples`` are held out."""
    if eval_samples >= len(samples):
        raise ValueError(f"{eval_samples} eval samples leave none of {len(samples)} to train")
    return samples[:-eval_samples], samples[-eval_samples:]


class ShardedSampler(torch.utils.data.Sampler[int]):
    """Dataset indices for one rank, resumable at any sample.

    The run reads one stream of samples: epoch ``e`` is a permutation of the dataset seeded by
    ``(seed, e)``, and the stream is the epochs one after the other. Optimizer step ``s``
    (from 1) takes the stream's samples ``[(s-1) x G, s x G)`` for a global batch of ``G``;
    its forward pass ``m`` gives rank ``r`` the ``micro`` samples starting at
    ``(s-1) x G + m x micro x world + r x micro``. So which samples a step trains on does not
    depend on the number of ranks, and a run resumed at sample ``start`` (from a checkpoint,
    on any number of ranks) reads exactly the rest of the stream: no sample twice in an epoch,
    none skipped.
    """

    def __init__(
        self, size: int, rank: int, world: int, micro: int, seed: int = 0, start: int = 0
    ) -> None:
        if not 0 <= rank < world or size < 1 or micro < 1 or start < 0:
            raise ValueError(f"bad sampler: size={size} rank={rank}/{world} micro={micro}")
        self.size, self.rank, self.world, self.micro = size, rank, world, micro
        self.seed, self.start = seed, start
        self._perms: dict[int, list[int]] = {}

    def stream(self, position: int) -> int:
        """The dataset index at ``position`` of the run's sample stream."""
        epoch, offset = divmod(position, self.size)
        perm = self._perms.get(epoch)
        if perm is None:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            perm = torch.randperm(self.size, generator=g).tolist()
            self._perms = {epoch: perm}  # one epoch's permutation at a time
        return perm[offset]

    def __iter__(self) -> Iterator[int]:
        stride = self.micro * self.world
        if self.start % stride:
            raise ValueError(f"resume position {self.start} is not a multiple of {stride}")
        base = self.start + self.rank * self.micro
        while True:
            for k in range(self.micro):
                yield self.stream(base + k)
            base += stride

    def __len__(self) -> int:  # an endless stream; DataLoader only needs it to exist
        return 2**62


class _Samples(torch.utils.data.Dataset[torch.Tensor]):
    def __init__(self, data: torch.Tensor) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.data[i]


def lr_at(step: int, cfg: Config) -> float:
    """Warmup over the first tenth of the steps, then cosine to a tenth of the peak: a pure
    function of the step, so a resumed run needs no scheduler state."""
    warmup = max(1, cfg.steps // 10)
    if step <= warmup:
        return cfg.lr * step / warmup
    done = (step - warmup) / max(1, cfg.steps - warmup)
    return cfg.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, done))))


# -- model ---------------------------------------------------------------------------------


def build_model_and_tokenizer(cfg: Config, text: str) -> tuple[Any, Any]:
    """A tiny Llama from a config and the corpus's tokenizer, or ``from_pretrained``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    if cfg.model is not None:  # a hub id or a directory (e.g. a shared volume's model cache)
        tokenizer = AutoTokenizer.from_pretrained(cfg.model)
        return AutoModelForCausalLM.from_pretrained(cfg.model), tokenizer
    tokenizer = corpus_tokenizer(text)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden,
        intermediate_size=cfg.hidden * 2,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.heads,
        max_position_embeddings=cfg.seq,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(config), tokenizer


def flops_per_token(model: Any, seq: int) -> int:
    """Training FLOPs per token: 6 x parameters + the attention's 12 x layers x hidden x
    sequence (for MFU)."""
    c = model.config
    params = sum(p.numel() for p in model.parameters())
    return int(6 * params + 12 * c.num_hidden_layers * c.hidden_size * seq)


def _fsdp_env(name: str) -> bool:
    return os.environ.get(name, "false").lower() == "true"


def shard_with_torch_fsdp2(model: Any, mixed_precision: str) -> Any:
    """``fully_shard`` each transformer layer, then the whole model, with the settings the
    ``fsdp`` preset passed to the ranks (``FSDP_RESHARD_AFTER_FORWARD``,
    ``FSDP_ACTIVATION_CHECKPOINTING``; ``FSDP_OFFLOAD_PARAMS`` changes nothing on a CPU)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    reshard = os.environ.get("FSDP_RESHARD_AFTER_FORWARD", "true").lower() == "true"
    if _fsdp_env("FSDP_ACTIVATION_CHECKPOINTING"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mixed_precision)
    policy = (
        MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
        if dtype is not None
        else MixedPrecisionPolicy()
    )
    # each transformer layer its own unit: the classes the model says not to split, as
    # accelerate's TRANSFORMER_BASED_WRAP picks them
    unsplit = set(getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in unsplit]
    if not layers:
        raise ValueError(f"{type(model).__name__} names no layers to shard (_no_split_modules)")
    for layer in layers:
        fully_shard(layer, reshard_after_forward=reshard, mp_policy=policy)
    fully_shard(model, reshard_after_forward=reshard, mp_policy=policy)
    return model


def shard_report(model: Any, rank: int) -> str:
    """What this rank holds of the model's parameters."""
    from torch.distributed.tensor import DTensor

    params = list(model.parameters())
    sharded = [p for p in params if isinstance(p, DTensor)]
    local = sum(p.to_local().numel() if isinstance(p, DTensor) else p.numel() for p in params)
    total = sum(p.numel() for p in params)
    placements = sorted({str(p.placements) for p in sharded})
    return (
        f"fsdp2: rank {rank} holds {local} of {total} parameter elements; "
        f"{len(sharded)} of {len(params)} parameters are DTensors {', '.join(placements)}"
    )


# -- training ------------------------------------------------------------------------------


def main() -> None:
    from accelerate import Accelerator
    from accelerate.utils import DistributedType, set_seed
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    import aviflow

    cfg = Config.from_env()
    accelerator = Accelerator(log_with=aviflow.tracker())
    rank, world = accelerator.process_index, accelerator.num_processes
    accum = cfg.accumulation(world)
    text = Path(cfg.corpus).read_text("utf-8") if cfg.corpus else tiny_corpus(seed=cfg.seed)
    set_seed(cfg.seed)  # the same initial weights on every rank
    model, tokenizer = build_model_and_tokenizer(cfg, text)
    train, held_out = split(blocks(tokenizer(text)["input_ids"], cfg.seq), cfg.eval_samples)
    fpt = flops_per_token(model, cfg.seq)
    accelerator.init_trackers(
        "llm",
        config={
            "world": world,
            "accumulation": accum,
            "flops_per_token": fpt,
            "parameters": sum(p.numel() for p in model.parameters()),
        },
    )

    if accelerator.distributed_type == DistributedType.FSDP:
        how = "fsdp2 by accelerate"
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
        model, prepared = accelerator.prepare(model, optimizer)
    elif _fsdp_env("ACCELERATE_USE_FSDP"):
        how = "fsdp2 by torch (accelerate has no FSDP here)"
        model = shard_with_torch_fsdp2(model.to(accelerator.device), accelerator.mixed_precision)
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
        prepared = optimizer
    else:
        how = "ddp" if world > 1 else "one process"
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
        model, prepared = accelerator.prepare(model, optimizer)
    accelerator.print(
        f"llm: {how}; {accelerator.distributed_type} x {world}, {accum} forward passes of "
        f"{cfg.micro_batch} per rank per step, {len(train)} train / {len(held_out)} eval "
        f"samples of {cfg.seq} tokens, {fpt} FLOPs per token"
    )
    if how.startswith("fsdp2"):
        print(shard_report(model, rank), flush=True)

    position = 0  # samples of the stream read so far, over all ranks

    def save(directory: Path) -> None:
        model_state, optim_state = get_state_dict(model, optimizer)
        dcp_save({"model": model_state, "optim": optim_state}, checkpoint_id=str(directory))
        if accelerator.is_main_process:
            (directory / DATA_STATE).write_text(json.dumps({"samples": position}))

    def load(directory: Path) -> None:
        nonlocal position
        model_state, optim_state = get_state_dict(model, optimizer)
        state: dict[str, Any] = {"model": model_state, "optim": optim_state}
        dcp_load(state, checkpoint_id=str(directory))
        set_state_dict(
            model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
        )
        position = int(json.loads((directory / DATA_STATE).read_text())["samples"])

    resumed = aviflow.resume(accelerator, load=load)
    start = (resumed or 0) + 1
    if resumed is not None:
        accelerator.print(f"resumed from step {resumed} at sample {position}")
    sampler = ShardedSampler(len(train), rank, world, cfg.micro_batch, cfg.seed, position)
    loader = iter(
        torch.utils.data.DataLoader(_Samples(train), batch_size=cfg.micro_batch, sampler=sampler)
    )

    def evaluate() -> float:
        """Mean next-token loss over the held-out samples: each rank its share, padded so
        every rank runs the same number of forward passes (FSDP's are collective)."""
        model.eval()
        mine = list(range(rank, len(held_out), world))
        per_rank = math.ceil(len(held_out) / world)
        total = torch.zeros(2, dtype=torch.float64)
        with torch.no_grad():
            for i in range(0, per_rank, cfg.micro_batch):
                idx = [mine[j] if j < len(mine) else 0 for j in range(i, i + cfg.micro_batch)]
                weight = torch.tensor(
                    [1.0 if j < len(mine) else 0.0 for j in range(i, i + cfg.micro_batch)]
                )
                x = held_out[idx].to(accelerator.device)
                logits = model(input_ids=x).logits.float()
                nll = torch.nn.functional.cross_entropy(
                    logits[:, :-1].reshape(-1, logits.size(-1)),
                    x[:, 1:].reshape(-1),
                    reduction="none",
                ).view(len(idx), -1)
                total[0] += (nll.sum(1).double() * weight.double()).sum()
                total[1] += weight.double().sum() * nll.size(1)
        total = accelerator.reduce(total.to(accelerator.device), reduction="sum").cpu()
        model.train()
        return float(total[0] / total[1])

    model.train()
    for step in range(start, cfg.steps + 1):
        began = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, cfg)
        step_loss = torch.zeros((), dtype=torch.float64)
        for m in range(accum):
            batch = next(loader).to(accelerator.device)
            last = m == accum - 1
            # DDP reduces gradients on the last pass only; FSDP reduce-scatters each pass
            sync = contextlib.nullcontext() if last or how != "ddp" else accelerator.no_sync(model)
            with sync, accelerator.autocast():
                loss = model(input_ids=batch, labels=batch).loss / accum
                accelerator.backward(loss)
            step_loss += loss.detach().double()
        prepared.step()
        prepared.zero_grad()
        position += cfg.global_batch
        mean_loss = accelerator.reduce(step_loss.to(accelerator.device), reduction="mean").item()
        values = {
            "loss": mean_loss,
            "lr": lr_at(step, cfg),
            "samples": position,
            "tokens": position * cfg.seq,
            "step_time": time.perf_counter() - began,
            "total_steps": cfg.steps,  # the estimates of jobs behind it count on its pace
        }
        if step % cfg.eval_every == 0 or step == cfg.steps:
            eval_loss = evaluate()
            values.update(eval_loss=eval_loss, eval_ppl=math.exp(min(eval_loss, 50.0)))
            accelerator.print(
                f"step {step:4d}  loss {mean_loss:.4f}  eval_ppl {values['eval_ppl']:.2f}"
            )
        accelerator.log(values, step=step)
        if step % cfg.ckpt_every == 0 or step == cfg.steps:
            aviflow.save_checkpoint(accelerator, step, save=save)
        if cfg.step_sleep:
            time.sleep(cfg.step_sleep)
    accelerator.end_training()
    accelerator.print("done")


if __name__ == "__main__":
    main()
