//! Tokenizers built from GGUF metadata alone: byte-level BPE (gpt2) and SentencePiece (llama).
