#!/usr/bin/env bash
# Tokenize Ultra-FineWeb, English split (the paper's 1B corpus), into token shards for compare-1b.sh.
# Needs the optional extra (pip install 'biosrecall[datasets]') and access to the Hugging Face hub.
#
#   OUT=data/ultra-fineweb MAX_DOCUMENTS=... scripts/lm/prepare-1b.sh
#
# MAX_DOCUMENTS (required): the split is far larger than one run; take enough documents for the 10.49B
# training tokens a run reads (`biosrecall lm plan --data` then reports the epochs).
# TOKENIZER_DOCUMENTS [500000]: documents the 32,768-entry byte-level BPE is trained on.
set -euo pipefail
: "${OUT:=data/ultra-fineweb}" "${TOKENIZER_DOCUMENTS:=500000}" "${BIOSRECALL:=biosrecall}"
: "${MAX_DOCUMENTS:?set MAX_DOCUMENTS to enough documents for 10.49B training tokens}"
$BIOSRECALL lm prepare hf:openbmb/Ultra-FineWeb --hf-split en --text-column content \
    --vocab-size 32768 --tokenizer-documents "$TOKENIZER_DOCUMENTS" --val-fraction 0.001 \
    --max-documents "$MAX_DOCUMENTS" --out "$OUT"
