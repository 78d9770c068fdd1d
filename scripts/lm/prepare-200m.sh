#!/usr/bin/env bash
# Tokenize UltraData-Math level L3 (the paper's 200M corpus) into token shards for sweep-200m.sh.
# Needs the optional extra (pip install 'biosrecall[datasets]') and access to the Hugging Face hub.
#
#   OUT=data/ultradata-math-l3 scripts/lm/prepare-200m.sh
#
# TEXT_COLUMN [text]: the text field; if the cards name another, the error lists the real columns.
# MAX_DOCUMENTS [all]: stop after this many documents. The run reads 2.52B tokens; a smaller corpus is
# repeated (a fresh order every epoch), which `biosrecall lm plan --data` reports as epochs.
# TOKENIZER_DOCUMENTS [500000]: documents the 32,768-entry byte-level BPE is trained on.
set -euo pipefail
: "${OUT:=data/ultradata-math-l3}" "${TEXT_COLUMN:=text}" "${TOKENIZER_DOCUMENTS:=500000}"
: "${BIOSRECALL:=biosrecall}"
name=openbmb/UltraData-Math
limit=()
if [ -n "${MAX_DOCUMENTS:-}" ]; then
    limit=(--max-documents "$MAX_DOCUMENTS")
fi
$BIOSRECALL lm prepare \
    "hf:$name:UltraData-Math-L3-QA-Synthetic" \
    "hf:$name:UltraData-Math-L3-Conversation-Synthetic" \
    "hf:$name:UltraData-Math-L3-Multi-Style-Synthetic" \
    "hf:$name:UltraData-Math-L3-Textbook-Exercise-Synthetic" \
    --text-column "$TEXT_COLUMN" --vocab-size 32768 --tokenizer-documents "$TOKENIZER_DOCUMENTS" \
    --val-fraction 0.005 "${limit[@]}" --out "$OUT"
