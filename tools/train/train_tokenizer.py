#!/usr/bin/env python3
"""Trains the byte-level BPE tokenizer of strata's default model and tokenises the corpus.

Runs on the GPU machine (HF `tokenizers`, `transformers`, numpy; no network). The tokenizer is
laid out like Qwen2/Qwen3's: NFC normaliser, the Qwen split regex then ByteLevel
(use_regex false) as pre-tokenizer, ByteLevel decoder and post-processor, BPE without
byte fallback, and Qwen's special tokens appended after the merges' vocabulary.

usage: python3 tools/train/train_tokenizer.py --corpus-dir .dev/train --work WORK [--vocab N]
Writes WORK/tokenizer/{tokenizer.json, tokenizer_config.json}, WORK/train_ids.npy,
WORK/heldout_ids.npy (uint16, documents joined by <|endoftext|>) and WORK/tokenizer_stats.json.
"""
import argparse
import json
import lzma
import os
import random
import sys
import time
import unicodedata

import numpy as np
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
EOT = "<|endoftext|>"
DOC_SEPARATOR = "\n" + EOT + "\n"
# Qwen2/Qwen3's pre-tokenizer split pattern (tokenizer.json of Qwen3), verbatim.
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# (content, special) in id order after the BPE vocabulary, as in Qwen's tokenizer.
ADDED_TOKENS = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False), ("</tool_call>", False), ("<tool_response>", False),
    ("</tool_response>", False), ("<think>", False), ("</think>", False),
]
CHAT_TEMPLATE = os.path.join(REPO, "tests", "fixtures", "chat", "templates",
                             "qwen3_5_small.jinja")
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
              "use_regex": False}


def log(*a):
    print("[tokenizer]", *a, flush=True)


def read_docs(path):
    with lzma.open(path, "rt", encoding="utf-8") as f:
        text = f.read()
    docs = [d.strip("\n") for d in text.split(DOC_SEPARATOR)]
    return [d for d in docs if d], len(text.encode())


def train(docs, vocab_total):
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_total - len(ADDED_TOKENS), min_frequency=2, show_progress=False,
        special_tokens=[], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer=trainer, length=len(docs))
    base = tok.get_vocab_size(with_added_tokens=False)
    for content, special in ADDED_TOKENS:
        t = AddedToken(content, single_word=False, lstrip=False, rstrip=False,
                       normalized=False, special=special)
        if special:
            tok.add_special_tokens([t])
        else:
            tok.add_tokens([t])
    return tok, base


def qwen_layout(tok_json):
    """Rewrites the pipeline fields to Qwen's exact tokenizer.json layout."""
    d = json.loads(tok_json)
    d["normalizer"] = {"type": "NFC"}
    d["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN_SPLIT}, "behavior": "Isolated",
         "invert": False},
        dict(BYTE_LEVEL)]}
    d["post_processor"] = dict(BYTE_LEVEL)
    d["decoder"] = dict(BYTE_LEVEL)
    d["truncation"] = None
    d["padding"] = None
    m = d["model"]
    m.update({"dropout": None, "unk_token": None, "continuing_subword_prefix": "",
              "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
              "ignore_merges": False})
    return d


def tokenizer_config(tok):
    added = {}
    for content, special in ADDED_TOKENS:
        added[str(tok.token_to_id(content))] = {
            "content": content, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": special}
    with open(CHAT_TEMPLATE, encoding="utf-8") as f:
        template = f.read()
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": [c for c, s in ADDED_TOKENS if s and c != EOT],
        "bos_token": None,
        "chat_template": template,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOT,
        "errors": "replace",
        "model_max_length": 8192,
        "pad_token": EOT,
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def check_roundtrip(tok, docs):
    bad = 0
    for d in docs:
        ids = tok.encode(d, add_special_tokens=False).ids
        if tok.decode(ids, skip_special_tokens=False) != unicodedata.normalize("NFC", d):
            bad += 1
    return bad


def check_transformers(tok_dir, tok, samples):
    """AutoTokenizer must load the folder, give the same ids and render the chat template."""
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(tok_dir)
    for s in samples:
        a = hf(s, add_special_tokens=False)["input_ids"]
        b = tok.encode(s, add_special_tokens=False).ids
        if a != b:
            raise SystemExit(f"transformers ({type(hf).__name__}) tokenises differently: "
                             f"{a[:20]} vs {b[:20]}")
    msgs = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What does the kernel do?"}]
    text = hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    ids = tok.encode(text, add_special_tokens=False).ids
    log(f"transformers {type(hf).__name__} agrees; chat template renders {len(ids)} tokens:",
        repr(text))
    return type(hf).__name__


def encode_docs(tok, docs, eot_id):
    t0 = time.time()
    enc = tok.encode_batch_fast if hasattr(tok, "encode_batch_fast") else tok.encode_batch
    out = enc(docs, add_special_tokens=False)
    total = sum(len(e.ids) for e in out) + len(out)
    ids = np.empty(total, dtype=np.uint16)
    pos = 0
    for e in out:
        n = len(e.ids)
        ids[pos:pos + n] = e.ids
        ids[pos + n] = eot_id
        pos += n + 1
    log(f"encoded {len(docs)} documents into {total} tokens in {time.time() - t0:.1f}s")
    return ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus-dir", default=os.path.join(REPO, ".dev", "train"))
    ap.add_argument("--work", required=True)
    ap.add_argument("--vocab", type=int, default=12288)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    t0 = time.time()
    train_docs, train_bytes = read_docs(os.path.join(args.corpus_dir, "corpus_train.txt.xz"))
    held_docs, held_bytes = read_docs(os.path.join(args.corpus_dir, "corpus_heldout.txt.xz"))
    log(f"corpus: {len(train_docs)} train documents ({train_bytes / 1e6:.1f} MB), "
        f"{len(held_docs)} held-out ({held_bytes / 1e6:.2f} MB), read in {time.time() - t0:.1f}s")

    t1 = time.time()
    tok, base = train(train_docs, args.vocab)
    log(f"BPE trained in {time.time() - t1:.1f}s: {base} byte-level tokens + merges, "
        f"{tok.get_vocab_size(with_added_tokens=True)} with the added tokens")

    tok_dir = os.path.join(args.work, "tokenizer")
    os.makedirs(tok_dir, exist_ok=True)
    path = os.path.join(tok_dir, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(qwen_layout(tok.to_str()), f, ensure_ascii=False, indent=1)
    tok = Tokenizer.from_file(path)  # from here on, exactly what ships
    eot_id = tok.token_to_id(EOT)
    ids_of = {c: tok.token_to_id(c) for c, _ in ADDED_TOKENS}
    if None in ids_of.values() or tok.get_vocab_size(with_added_tokens=True) > 65535:
        raise SystemExit(f"added tokens missing or vocabulary too large: {ids_of}")
    with open(os.path.join(tok_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(tok), f, ensure_ascii=False, indent=2)

    bad = check_roundtrip(tok, held_docs[:50])
    if bad:
        raise SystemExit(f"{bad} held-out documents do not survive encode/decode")
    samples = [d[:2000] for d in held_docs[:20]] + ["The kernel", "Hello, world! 12345 \u00e9\n\n"]
    hf_class = None
    for cls in ("Qwen2Tokenizer", "PreTrainedTokenizerFast"):
        cfg_path = os.path.join(tok_dir, "tokenizer_config.json")
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
        cfg["tokenizer_class"] = cls
        with open(cfg_path, "w", encoding="utf-8") as f:
            json.dump(cfg, f, ensure_ascii=False, indent=2)
        try:
            hf_class = check_transformers(tok_dir, tok, samples)
            break
        except BaseException as e:  # noqa: BLE001 - report and try the next class
            log(f"WARNING: transformers check with tokenizer_class {cls} failed: {e!r}")
    if hf_class is None:
        log("WARNING: transformers could not load the tokenizer folder; strata reads "
            "tokenizer.json directly, continuing")

    random.Random(args.seed).shuffle(train_docs)  # packing order
    train_ids = encode_docs(tok, train_docs, eot_id)
    held_ids = encode_docs(tok, held_docs, eot_id)
    np.save(os.path.join(args.work, "train_ids.npy"), train_ids)
    np.save(os.path.join(args.work, "heldout_ids.npy"), held_ids)
    stats = {
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "bpe_vocab": base,
        "added_tokens": ids_of,
        "eos_token_id": eot_id,
        "train_tokens": int(train_ids.size),
        "heldout_tokens": int(held_ids.size),
        "train_bytes": train_bytes,
        "heldout_bytes": held_bytes,
        "bytes_per_token": train_bytes / max(1, train_ids.size),
        "transformers_tokenizer_class": hf_class,
        "seconds": time.time() - t0,
    }
    with open(os.path.join(args.work, "tokenizer_stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    log(json.dumps(stats))
    examples = ["The kernel", " the scheduler", "PostgreSQL", "<|im_start|>user\nhi<|im_end|>"]
    for s in examples:
        e = tok.encode(s, add_special_tokens=False)
        log(f"{s!r} -> {e.ids} {e.tokens}")


if __name__ == "__main__":
    sys.exit(main())
